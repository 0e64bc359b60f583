// A KafkaConsumer (Kafka 4.4's Java client, unmodified) in a group, for the tests: run as a
// single-file source program against Kafka's jars (tests/support/kafka.py's java_program).
//
//   java GroupConsumer.java [--topics a,b | --pattern REGEX] [--records N] [--seconds S]
//        [--stop-file PATH] [--commit] [--close-timeout-ms MS] key=value ...
//
// Every key=value is the consumer's configuration (bootstrap.servers, group.id,
// group.protocol, group.instance.id, ...). It polls until it has read N records, or the
// stop file exists, or S seconds have passed; commits what it read (--commit, synchronous)
// and closes. On stdout, one JSON object a line: {"assigned": [...]} at every change of its
// assignment, {"count": N} (distinct values read) at most twice a second while it grows, then {"read": N, "values": [...], "committed": {"t-0": 12, ...},
// "member": "...", "generation": G}.
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupConsumer {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String names(Collection<TopicPartition> partitions) {
        List<String> out = new ArrayList<>();
        for (TopicPartition p : partitions) out.add(quote(p.topic() + "-" + p.partition()));
        Collections.sort(out);
        return "[" + String.join(",", out) + "]";
    }

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        List<String> topics = new ArrayList<>();
        String pattern = null, stopFile = null;
        long records = Long.MAX_VALUE, seconds = 120, closeTimeout = 30000;
        boolean commit = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--topics" -> topics.addAll(Arrays.asList(args[++i].split(",")));
                case "--pattern" -> pattern = args[++i];
                case "--records" -> records = Long.parseLong(args[++i]);
                case "--seconds" -> seconds = Long.parseLong(args[++i]);
                case "--stop-file" -> stopFile = args[++i];
                case "--commit" -> commit = true;
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
        config.putIfAbsent("auto.offset.reset", "earliest");
        config.putIfAbsent("enable.auto.commit", "false");
        List<String> values = new ArrayList<>();
        Set<String> distinct = new HashSet<>();
        Set<TopicPartition> held = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    held.removeAll(partitions);
                    System.out.println("{\"assigned\": " + names(held) + "}");
                    System.out.flush();
                }
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    held.addAll(partitions);
                    System.out.println("{\"assigned\": " + names(held) + "}");
                    System.out.flush();
                }
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    onPartitionsRevoked(partitions);
                }
            };
            // the consumer protocol's regular expression is the coordinator's to resolve (KIP-848,
            // RE2); a java.util.regex.Pattern is matched here, against the client's metadata
            if (pattern != null && "consumer".equalsIgnoreCase(config.getProperty("group.protocol", "classic")))
                consumer.subscribe(new SubscriptionPattern(pattern), listener);
            else if (pattern != null) consumer.subscribe(Pattern.compile(pattern), listener);
            else consumer.subscribe(topics, listener);
            long deadline = System.nanoTime() + seconds * 1_000_000_000L;
            long reportedAt = 0;
            int reported = 0;
            while (values.size() < records && System.nanoTime() < deadline
                    && (stopFile == null || !Files.exists(Path.of(stopFile)))) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    values.add(record.value());
                    distinct.add(record.value());
                }
                if (distinct.size() != reported && System.nanoTime() - reportedAt > 500_000_000L) {
                    reported = distinct.size();
                    reportedAt = System.nanoTime();
                    System.out.println("{\"count\": " + reported + "}");
                    System.out.flush();
                }
            }
            StringBuilder committed = new StringBuilder("{");
            // a last commit that meets a rebalance (another member left as it stopped) is tried
            // again once polls have rejoined the group, as the client's documentation says to
            long commitDeadline = System.nanoTime() + 60_000_000_000L;
            while (commit && !consumer.assignment().isEmpty()) {
                try {
                    consumer.commitSync(Duration.ofSeconds(30));
                    break;
                } catch (RebalanceInProgressException | CommitFailedException e) {
                    if (System.nanoTime() > commitDeadline) throw e;
                    System.out.println("{\"commit\": \"retried after a rebalance\"}");
                    for (int i = 0; i < 5; i++)
                        for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200)))
                            values.add(record.value());
                }
            }
            if (commit && !consumer.assignment().isEmpty()) {
                Map<TopicPartition, OffsetAndMetadata> offsets = consumer.committed(consumer.assignment(), Duration.ofSeconds(30));
                List<String> entries = new ArrayList<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    if (e.getValue() != null)
                        entries.add(quote(e.getKey().topic() + "-" + e.getKey().partition()) + ": " + e.getValue().offset());
                }
                committed.append(String.join(", ", entries));
            }
            committed.append("}");
            ConsumerGroupMetadata group = consumer.groupMetadata();
            List<String> quoted = new ArrayList<>();
            for (String v : values) quoted.add(quote(v == null ? "" : v));
            System.out.println("{\"read\": " + values.size() + ", \"values\": [" + String.join(",", quoted)
                    + "], \"committed\": " + committed + ", \"member\": " + quote(group.memberId())
                    + ", \"generation\": " + group.generationId() + "}");
            System.out.flush();
            consumer.close(CloseOptions.timeout(Duration.ofMillis(closeTimeout)));
        }
    }
}
