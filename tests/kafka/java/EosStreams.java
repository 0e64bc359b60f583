// A Kafka Streams application (Kafka 4.4's, unmodified) with processing.guarantee=exactly_once_v2,
// for the tests: run as a single-file source program against Kafka's jars (tests/support/kafka.py's
// java_command), one stream thread.
//
//   java EosStreams.java --input T --copy T --counts T --state-dir DIR
//        [--hold before-offsets|after-offsets --hold-file PATH] key=value ...
//
// Every key=value is Streams' configuration (bootstrap.servers, application.id, and the
// clients' settings, which Streams passes on). The topology is one sub-topology, so one task
// per input partition: every input record goes to --copy as "out-" + its value, and each key's
// count (a KTable whose store, named "counts", Streams keeps in a changelog topic it creates)
// goes to --counts as "key=count", keyed by the key.
//
// --hold: once the hold file exists, the stream thread stops for good at its next commit,
// before its producer sends the consumer's offsets to the transaction (its records are
// written, its transaction open, no offsets anywhere) or after (TxnOffsetCommit answered,
// so the group coordinator holds them pending, and no EndTxn sent). A test SIGKILLs the
// process then: a kill at an arbitrary moment lands in either case by chance.
//
// On stdout, one JSON object a line: {"state": S} at every change of state, {"active": [task
// ids]} when its active tasks change (none unless RUNNING), {"processed": N} (records
// processed, those of aborted transactions included) at most twice a second while it grows,
// {"held": POINT, "processed": N, "offsets": {"t-0": 12, ...}} when it holds. SIGTERM closes it.
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.ConsoleAppender;
import org.apache.logging.log4j.core.config.Configuration;
import org.apache.logging.log4j.core.config.LoggerConfig;
import org.apache.logging.log4j.core.layout.PatternLayout;

public class EosStreams {
    static final AtomicLong processed = new AtomicLong();
    static String hold = null;
    static Path holdFile = null;

    static synchronized void say(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void holdIf(String point, Map<TopicPartition, OffsetAndMetadata> offsets) {
        if (!point.equals(hold) || !Files.exists(holdFile)) return;
        List<String> entries = new ArrayList<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet())
            entries.add(quote(e.getKey().topic() + "-" + e.getKey().partition()) + ": " + e.getValue().offset());
        Collections.sort(entries);
        say("{\"held\": " + quote(point) + ", \"processed\": " + processed.get() + ", \"offsets\": {"
                + String.join(", ", entries) + "}}");
        CountDownLatch never = new CountDownLatch(1);
        while (true) {
            try {
                never.await();
            } catch (InterruptedException e) {
                // Streams interrupts nothing here; the SIGKILL that follows ends the process
            }
        }
    }

    // Streams' own clients (DefaultKafkaClientSupplier's), the producer's transaction commit
    // observed for --hold
    static class Clients implements KafkaClientSupplier {
        public Admin getAdmin(Map<String, Object> config) {
            return Admin.create(config);
        }

        public Producer<byte[], byte[]> getProducer(Map<String, Object> config) {
            return new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer()) {
                @Override
                public void sendOffsetsToTransaction(Map<TopicPartition, OffsetAndMetadata> offsets,
                                                     ConsumerGroupMetadata group) {
                    holdIf("before-offsets", offsets);
                    super.sendOffsetsToTransaction(offsets, group);
                    holdIf("after-offsets", offsets);
                }
            };
        }

        public Consumer<byte[], byte[]> getConsumer(Map<String, Object> config) {
            return new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        }

        public Consumer<byte[], byte[]> getRestoreConsumer(Map<String, Object> config) {
            return getConsumer(config);
        }

        public Consumer<byte[], byte[]> getGlobalConsumer(Map<String, Object> config) {
            return getConsumer(config);
        }
    }

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        String input = null, copy = null, counts = null, stateDir = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--input" -> input = args[++i];
                case "--copy" -> copy = args[++i];
                case "--counts" -> counts = args[++i];
                case "--state-dir" -> stateDir = args[++i];
                case "--hold" -> hold = args[++i];
                case "--hold-file" -> holdFile = Path.of(args[++i]);
                default -> {
                    int eq = args[i].indexOf('=');
                    if (eq < 0) throw new IllegalArgumentException("not key=value: " + args[i]);
                    config.put(args[i].substring(0, eq), args[i].substring(eq + 1));
                }
            }
        }
        if ((hold == null) != (holdFile == null)) throw new IllegalArgumentException("--hold needs --hold-file");
        // The tools' logging is WARN on stderr, untimed; what a failure is read from is
        // Streams' states and tasks and the consumer's answers from its group coordinator
        // (UNSTABLE_OFFSET_COMMIT is logged at INFO), beside groupkeeper's log: INFO, timed.
        // Kafka's classes log through the class path's loader, whose logging context is not
        // this program's (a single-file program has a loader of its own).
        LoggerContext logging = (LoggerContext) LogManager.getContext(KafkaStreams.class.getClassLoader(), false);
        Configuration logs = logging.getConfiguration();
        ConsoleAppender timed = ConsoleAppender.newBuilder().setName("timed")
                .setTarget(ConsoleAppender.Target.SYSTEM_ERR).setConfiguration(logs)
                .setLayout(PatternLayout.newBuilder().withPattern("[%d{HH:mm:ss.SSS}] %p %m (%c)%n")
                        .withConfiguration(logs).build())
                .build();
        timed.start();
        logs.addAppender(timed);
        for (String name : new ArrayList<>(logs.getRootLogger().getAppenders().keySet()))
            logs.getRootLogger().removeAppender(name);
        logs.getRootLogger().addAppender(timed, null, null);
        for (String name : List.of("org.apache.kafka.streams",
                "org.apache.kafka.clients.consumer.internals.ConsumerCoordinator",
                "org.apache.kafka.clients.producer.internals.TransactionManager"))
            logs.addLogger(name, new LoggerConfig(name, Level.INFO, true));
        logging.updateLoggers();
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        config.putIfAbsent(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> records = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        records.mapValues(v -> {
            processed.incrementAndGet();
            return "out-" + v;
        }).to(copy, Produced.with(Serdes.String(), Serdes.String()));
        records.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues((key, n) -> key + "=" + n)
                .to(counts, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), config, new Clients());
        streams.setStateListener((now, before) -> say("{\"state\": " + quote(now.name()) + "}"));
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            closed.countDown();
        }));
        streams.start();
        long reported = 0;
        String tasks = null;
        while (!closed.await(500, TimeUnit.MILLISECONDS)) {
            long now = processed.get();
            if (now != reported) {
                reported = now;
                say("{\"processed\": " + now + "}");
            }
            List<String> active = new ArrayList<>();
            if (streams.state() == KafkaStreams.State.RUNNING)
                for (ThreadMetadata thread : streams.metadataForLocalThreads())
                    for (TaskMetadata task : thread.activeTasks()) active.add(quote(task.taskId().toString()));
            Collections.sort(active);
            String listed = "[" + String.join(",", active) + "]";
            if (!listed.equals(tasks)) {
                tasks = listed;
                say("{\"active\": " + listed + "}");
            }
        }
    }
}
