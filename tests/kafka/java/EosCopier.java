// The Java client's exactly-once read-process-write loop (Kafka 4.4's client, unmodified), for
// the tests: a read_committed KafkaConsumer in a group and a transactional KafkaProducer copy
// every record of one topic to another as "out-" + its value, on the same partition, each
// polled batch in one transaction that also carries the consumer's positions
// (sendOffsetsToTransaction with the consumer's group metadata), as Kafka's documentation
// describes the loop.
//
//   java EosCopier.java --input T --output T --group G --transactional-id X
//        [--records N] [--abort-every N] [--hang-after K] [--seconds S] key=value ...
//
// --records N: stop once N input records were copied in committed transactions (default:
// never). --abort-every N: abort every Nth transaction instead of committing it, then seek
// the assignment back to its committed offsets (consumer.committed, which a read_committed
// consumer asks with require_stable) and go on. --hang-after K: after K committed
// transactions, begin one more, produce its batch, send its offsets, flush, print
// {"hanging": true, "copied": N, "transactions": K, "open": [values], "offsets": {...}} and
// sleep until killed (a producer killed mid-transaction). --seconds S: give up after S
// seconds (default 300): {"done": false, ..., "positions": {...}} and exit status 3.
//
// key=value goes to both the consumer's and the producer's configuration (bootstrap.servers,
// say); consumer.key=value to the consumer's only, producer.key=value to the producer's only.
//
// Errors, as an application handles them: ProducerFencedException (a newer producer with this
// transactional.id has begun: we are a zombie), OutOfOrderSequenceException,
// UnsupportedVersionException and AuthorizationException are fatal: the producer is closed,
// never aborted, and the program exits 2 after {"fatal": ...}. Any other KafkaException in a
// transaction (CommitFailedException from sendOffsetsToTransaction when the group has moved on
// to a new generation, a TransactionAbortableException, ...) aborts the transaction and
// rewinds as an abort does; such transactions are counted "failed", never as copied.
//
// On stdout, one JSON object a line: {"initialized": true} once initTransactions returned;
// {"assigned": [...]} at every change of the assignment; {"committed": [values...],
// "offsets": {"t-0": 12, ...}} per committed transaction (the input values it copied, the
// offsets it sent); {"aborted": N, "from": {...}, "rewound": {...}} per abort of --abort-every
// (N: so far; where the batch began, and the committed offsets it sought for those partitions
// afterwards: the beginning, 0, where none); {"failed": "..."} per
// transaction failed; at the end {"done": true, "copied": N, "transactions": T, "aborted": A,
// "failed": F} (T: committed).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class EosCopier {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();  // the test reads lines as they come, and may SIGKILL us after one
    }

    static String values(List<String> values) {
        List<String> quoted = new ArrayList<>();
        for (String v : values) quoted.add(quote(v));
        return "[" + String.join(",", quoted) + "]";
    }

    static String offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        List<String> entries = new ArrayList<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet())
            entries.add(quote(e.getKey().topic() + "-" + e.getKey().partition()) + ": " + e.getValue().offset());
        Collections.sort(entries);
        return "{" + String.join(", ", entries) + "}";
    }

    static boolean fatal(KafkaException error) {
        return error instanceof ProducerFencedException || error instanceof OutOfOrderSequenceException
                || error instanceof UnsupportedVersionException || error instanceof AuthorizationException;
    }

    /** Back to the committed offsets of every assigned partition (the beginning where none is
     *  committed): what an aborted transaction read is read again. A read_committed consumer
     *  asks with require_stable, so this waits while the aborted transaction's offsets pend. */
    static Map<TopicPartition, OffsetAndMetadata> rewind(KafkaConsumer<String, String> consumer, long deadline) {
        while (true) {
            try {
                Set<TopicPartition> assignment = consumer.assignment();
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assignment, Duration.ofSeconds(10));
                Map<TopicPartition, OffsetAndMetadata> sought = new HashMap<>();
                List<TopicPartition> none = new ArrayList<>();
                for (TopicPartition tp : assignment) {
                    OffsetAndMetadata offset = committed.get(tp);
                    if (offset == null) none.add(tp);
                    else consumer.seek(tp, offset);
                    sought.put(tp, offset != null ? offset : new OffsetAndMetadata(0));  // the input logs start at 0
                }
                if (!none.isEmpty()) consumer.seekToBeginning(none);
                return sought;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                if (System.nanoTime() > deadline) throw e;
                say("{\"rewind\": \"timed out, again\"}");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Properties consumerConfig = new Properties(), producerConfig = new Properties();
        String input = null, output = null;
        long records = Long.MAX_VALUE, abortEvery = 0, hangAfter = -1, seconds = 300;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--input" -> input = args[++i];
                case "--output" -> output = args[++i];
                case "--group" -> consumerConfig.put("group.id", args[++i]);
                case "--transactional-id" -> producerConfig.put("transactional.id", args[++i]);
                case "--records" -> records = Long.parseLong(args[++i]);
                case "--abort-every" -> abortEvery = Long.parseLong(args[++i]);
                case "--hang-after" -> hangAfter = Long.parseLong(args[++i]);
                case "--seconds" -> seconds = Long.parseLong(args[++i]);
                default -> {
                    int eq = args[i].indexOf('=');
                    if (eq < 0) throw new IllegalArgumentException("not key=value: " + args[i]);
                    String key = args[i].substring(0, eq), value = args[i].substring(eq + 1);
                    if (key.startsWith("consumer.")) consumerConfig.put(key.substring(9), value);
                    else if (key.startsWith("producer.")) producerConfig.put(key.substring(9), value);
                    else {
                        consumerConfig.put(key, value);
                        producerConfig.put(key, value);
                    }
                }
            }
        }
        consumerConfig.put("key.deserializer", StringDeserializer.class.getName());
        consumerConfig.put("value.deserializer", StringDeserializer.class.getName());
        // the loop's own settings, not the test's to change: it reads only what committed
        // transactions wrote, and its offsets go with its transactions, never on their own
        consumerConfig.put("isolation.level", "read_committed");
        consumerConfig.put("enable.auto.commit", "false");
        consumerConfig.putIfAbsent("auto.offset.reset", "earliest");
        producerConfig.put("key.serializer", StringSerializer.class.getName());
        producerConfig.put("value.serializer", StringSerializer.class.getName());

        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        long copied = 0, transactions = 0, aborted = 0, failed = 0, begun = 0;
        Set<TopicPartition> held = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
        KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig);
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig);
        try {
            producer.initTransactions();
            say("{\"initialized\": true}");
            // nothing to do on a revocation: no transaction is open while the consumer polls
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    held.removeAll(partitions);
                    report();
                }
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    held.addAll(partitions);
                    report();
                }
                void report() {
                    List<String> names = new ArrayList<>();
                    for (TopicPartition p : held) names.add(p.topic() + "-" + p.partition());
                    say("{\"assigned\": " + values(names) + "}");
                }
            });
            while (copied < records) {
                if (System.nanoTime() > deadline) {
                    // where it stands, for whoever wonders why it got no further
                    Map<TopicPartition, OffsetAndMetadata> at = new HashMap<>();
                    for (TopicPartition tp : consumer.assignment())
                        at.put(tp, new OffsetAndMetadata(consumer.position(tp, Duration.ofSeconds(5))));
                    say("{\"done\": false, \"copied\": " + copied + ", \"transactions\": " + transactions
                            + ", \"aborted\": " + aborted + ", \"failed\": " + failed + ", \"positions\": "
                            + offsets(at) + "}");
                    producer.close(Duration.ZERO);
                    System.exit(3);
                }
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                if (batch.isEmpty()) continue;
                List<String> read = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>(), from = new HashMap<>();
                for (TopicPartition tp : batch.partitions())  // where the batch began
                    from.put(tp, new OffsetAndMetadata(batch.records(tp).get(0).offset()));
                boolean abort = false, planned = false;
                try {
                    producer.beginTransaction();
                    begun++;
                    for (ConsumerRecord<String, String> record : batch) {
                        producer.send(new ProducerRecord<>(output, record.partition(), record.key(), "out-" + record.value()));
                        read.add(record.value());
                    }
                    // the positions of the partitions this batch came from: the next offset to read
                    for (TopicPartition tp : batch.partitions())
                        positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                    producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
                    if (hangAfter >= 0 && transactions == hangAfter) {
                        producer.flush();  // the batch is in the output topic's log, its transaction open
                        say("{\"hanging\": true, \"copied\": " + copied + ", \"transactions\": " + transactions
                                + ", \"open\": " + values(read) + ", \"offsets\": " + offsets(positions) + "}");
                        Thread.sleep(Long.MAX_VALUE);
                    }
                    if (abortEvery > 0 && begun % abortEvery == 0) {
                        abort = planned = true;
                    } else {
                        commit(producer, deadline);
                        transactions++;
                        copied += read.size();
                        say("{\"committed\": " + values(read) + ", \"offsets\": " + offsets(positions) + "}");
                    }
                } catch (KafkaException error) {
                    if (fatal(error)) throw error;
                    // abortable: CommitFailedException (the group rebalanced under the
                    // transaction), a TransactionAbortableException, a produce that failed...
                    failed++;
                    say("{\"failed\": " + quote(error.toString()) + "}");
                    abort = true;
                }
                if (abort) {
                    producer.abortTransaction();
                    Map<TopicPartition, OffsetAndMetadata> sought = rewind(consumer, deadline);
                    if (planned) {
                        aborted++;
                        // where the batch began and where the committed offsets took the consumer
                        // back to: the same, unless the aborted offsets were committed (or the
                        // last committed transaction's were lost)
                        Map<TopicPartition, OffsetAndMetadata> back = new HashMap<>();
                        for (TopicPartition tp : from.keySet()) if (sought.containsKey(tp)) back.put(tp, sought.get(tp));
                        say("{\"aborted\": " + aborted + ", \"from\": " + offsets(from) + ", \"rewound\": "
                                + offsets(back) + "}");
                    }
                }
            }
            say("{\"done\": true, \"copied\": " + copied + ", \"transactions\": " + transactions
                    + ", \"aborted\": " + aborted + ", \"failed\": " + failed + "}");
            consumer.close();
            producer.close();
        } catch (KafkaException error) {
            if (!fatal(error)) throw error;
            // a zombie, or a producer that cannot go on: it must not abort (the transaction is
            // no longer its own), only close; its consumer leaves the group
            say("{\"fatal\": " + quote(error.toString()) + "}");
            producer.close(Duration.ZERO);
            consumer.close();
            System.exit(2);
        }
    }

    /** commitTransaction, again after a TimeoutException (the outcome is then unknown to us;
     *  calling it again is how Kafka's documentation says to learn it), until the deadline. */
    static void commit(KafkaProducer<String, String> producer, long deadline) {
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                if (System.nanoTime() > deadline) throw e;
                say("{\"commit\": \"timed out, again\"}");
            }
        }
    }
}
