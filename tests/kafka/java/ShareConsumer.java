// A KafkaShareConsumer (Kafka 4.4's Java client, unmodified; KIP-932's share groups) for the
// tests: run as a single-file source program against Kafka's jars (tests/support/kafka.py's
// java_program or java_command).
//
//   java ShareConsumer.java --topics a,b [--records N] [--seconds S] [--stop-file PATH]
//        [--explicit] [--close-timeout-ms MS] key=value ...
//
// Every key=value is the consumer's configuration (bootstrap.servers, group.id, ...). It polls
// until it has read N records, or the stop file exists, or S seconds have passed. Each record
// read is acknowledged: with --explicit (share.acknowledgement.mode=explicit) one by one as
// ACCEPT, committed with commitSync after each poll; otherwise implicitly (the next poll, the
// last commitSync or close accepts what the previous poll gave). On stdout, one JSON object a
// line: {"polled": n, "read": total} after every poll that brought records, then, once closed,
// {"read": N, "values": [...], "redelivered": R, "acknowledged": A, "ack_failed": F,
// "errors": [...]}: A and F count the offsets the acknowledgement commit callback reported
// committed and failed; R the records delivered more than once; errors what commitSync said.
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsumer {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void line(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        List<String> topics = new ArrayList<>();
        String stopFile = null;
        long records = Long.MAX_VALUE, seconds = 120, closeTimeout = 30000;
        boolean explicit = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--topics" -> topics.addAll(Arrays.asList(args[++i].split(",")));
                case "--records" -> records = Long.parseLong(args[++i]);
                case "--seconds" -> seconds = Long.parseLong(args[++i]);
                case "--stop-file" -> stopFile = args[++i];
                case "--explicit" -> explicit = true;
                case "--close-timeout-ms" -> closeTimeout = Long.parseLong(args[++i]);
                default -> {
                    int eq = args[i].indexOf('=');
                    if (eq < 0) throw new IllegalArgumentException("not key=value: " + args[i]);
                    config.put(args[i].substring(0, eq), args[i].substring(eq + 1));
                }
            }
        }
        config.putIfAbsent("key.deserializer", StringDeserializer.class.getName());
        config.putIfAbsent("value.deserializer", StringDeserializer.class.getName());
        config.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        List<String> values = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        long[] acknowledged = {0, 0};  // committed, failed: as the callback reports them
        long redelivered = 0;
        KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(config);
        try {
            consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
                long count = 0;
                for (Set<Long> o : offsets.values()) count += o.size();
                acknowledged[exception == null ? 0 : 1] += count;
                if (exception != null) errors.add("callback: " + exception);
            });
            consumer.subscribe(topics);
            long deadline = System.nanoTime() + seconds * 1_000_000_000L;
            while (values.size() < records && System.nanoTime() < deadline
                    && (stopFile == null || !Files.exists(Path.of(stopFile)))) {
                ConsumerRecords<String, String> polled = consumer.poll(Duration.ofMillis(200));
                if (polled.isEmpty()) continue;
                for (ConsumerRecord<String, String> record : polled) {
                    values.add(record.value());
                    if (record.deliveryCount().orElse((short) 1) > 1) redelivered++;
                    if (explicit) consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                }
                if (explicit) committed(consumer.commitSync(Duration.ofSeconds(30)), errors);
                line("{\"polled\": " + polled.count() + ", \"read\": " + values.size() + "}");
            }
            committed(consumer.commitSync(Duration.ofSeconds(30)), errors);  // implicit: what the last poll gave
        } finally {
            consumer.close(Duration.ofMillis(closeTimeout));
        }
        List<String> quoted = new ArrayList<>();
        for (String v : values) quoted.add(quote(v == null ? "" : v));
        List<String> said = new ArrayList<>();
        for (String e : errors) said.add(quote(e));
        line("{\"read\": " + values.size() + ", \"values\": [" + String.join(",", quoted) + "], \"redelivered\": "
                + redelivered + ", \"acknowledged\": " + acknowledged[0] + ", \"ack_failed\": " + acknowledged[1]
                + ", \"errors\": [" + String.join(",", said) + "]}");
    }

    static void committed(Map<TopicIdPartition, Optional<KafkaException>> results, List<String> errors) {
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : results.entrySet()) {
            e.getValue().ifPresent(error -> errors.add(e.getKey() + ": " + error));
        }
    }
}
