// A KafkaProducer (Kafka 4.4's Java client, unmodified) for the tests: sends N records
// "PREFIX-i" to a topic with acks=all and idempotence (its defaults), or runs until a stop
// file exists (--stop-file), at most --rate records a second. Prints one JSON line:
// {"acked": [...values acknowledged...], "failed": N}.
//
//   java Produce.java --topic T [--records N | --stop-file PATH] [--prefix P] [--rate R] key=value ...
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.*;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class Produce {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        String topic = null, prefix = "java", stopFile = null;
        long records = 0, rate = 0;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--topic" -> topic = args[++i];
                case "--records" -> records = Long.parseLong(args[++i]);
                case "--prefix" -> prefix = args[++i];
                case "--stop-file" -> stopFile = args[++i];
                case "--rate" -> rate = Long.parseLong(args[++i]);
                default -> {
                    int eq = args[i].indexOf('=');
                    config.put(args[i].substring(0, eq), args[i].substring(eq + 1));
                }
            }
        }
        config.putIfAbsent("key.serializer", StringSerializer.class.getName());
        config.putIfAbsent("value.serializer", StringSerializer.class.getName());
        config.putIfAbsent("acks", "all");
        ConcurrentLinkedQueue<String> acked = new ConcurrentLinkedQueue<>();
        AtomicLong failed = new AtomicLong();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config)) {
            long start = System.nanoTime();
            for (long i = 0; stopFile != null ? !Files.exists(Path.of(stopFile)) : i < records; i++) {
                String value = prefix + "-" + i;
                producer.send(new ProducerRecord<>(topic, value), (metadata, error) -> {
                    if (error == null) acked.add(value); else failed.incrementAndGet();
                });
                if (rate > 0) {
                    long due = start + (i + 1) * 1_000_000_000L / rate;
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            producer.flush();
        }
        StringBuilder out = new StringBuilder("{\"acked\": [");
        boolean first = true;
        for (String v : acked) {
            if (!first) out.append(',');
            out.append('"').append(v).append('"');
            first = false;
        }
        out.append("], \"failed\": ").append(failed.get()).append('}');
        System.out.println(out);
    }
}
