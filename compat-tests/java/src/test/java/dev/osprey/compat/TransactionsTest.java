package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidRegularExpression;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Transactions with the Java client and Kafka's own transactional tools: a transactional
 * KafkaProducer against read_committed and read_uncommitted consumers; Kafka's
 * TransactionalMessageCopier (the exactly-once copier of Kafka's system tests) copying
 * with random aborts, also when it is killed half-way and restarted; and
 * {@code kafka-transactions.sh} (TransactionsCommand) listing, describing and aborting an
 * open transaction so that a read_committed consumer can move on.
 */
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class TransactionsTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String COPIER = "org.apache.kafka.tools.TransactionalMessageCopier";
    private static final String TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand";
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    private static final Duration COPIER_TIMEOUT = Duration.ofSeconds(80);
    private static final Pattern TOTAL_PROCESSED = Pattern.compile("\"totalProcessed\":(\\d+)");

    // ----- a transactional KafkaProducer ------------------------------------------------------

    @Test
    void read_committed_sees_exactly_the_committed_transactions_in_order() throws Exception {
        String topic = "tx-java";
        createTopic(topic, 2);
        List<String> finishes = List.of("commit", "abort", "commit", "abort", "commit");
        Map<Integer, List<String>> committed = new TreeMap<>();
        Map<Integer, List<String>> everything = new TreeMap<>();
        try (KafkaProducer<String, String> producer = transactionalProducer("tx-java-id", 60_000)) {
            producer.initTransactions();
            for (int t = 0; t < finishes.size(); t++) {
                String finish = finishes.get(t);
                producer.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    int partition = i % 2;
                    String value = finish + "-" + t + "-" + i;
                    producer.send(new ProducerRecord<>(topic, partition, null, value));
                    everything.computeIfAbsent(partition, p -> new ArrayList<>()).add(value);
                    if (finish.equals("commit")) {
                        committed.computeIfAbsent(partition, p -> new ArrayList<>()).add(value);
                    }
                }
                if (finish.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.flush(); // the aborted records are stored, then aborted
                    producer.abortTransaction();
                }
            }
        }
        assertEquals(committed, valuesByPartition(readToEnd(topic, 2, "read_committed")));
        assertEquals(everything, valuesByPartition(readToEnd(topic, 2, "read_uncommitted")));
        // The last transaction was committed: the last stable offset is the high watermark.
        assertEquals(endOffsets(topic, 2, "read_uncommitted"), endOffsets(topic, 2, "read_committed"));
    }

    /**
     * The broker finalizes {@code transaction.version=2}, so kafka-clients 4.4 runs KIP-890
     * part 2: no AddPartitionsToTxn or AddOffsetsToTxn of its own, EndTxn v5, and an epoch
     * bump at every transaction end, which the epoch reported after four transactions shows.
     */
    @Test
    void transaction_version_2_bumps_the_epoch_at_every_transaction_end() throws Exception {
        TransactionRounds.run(BROKER, "tx-tv2", 4);
    }

    /**
     * ListTransactions v2's transactional id pattern (KIP-1152): a regular expression the
     * whole id must match; a bad one is INVALID_REGULAR_EXPRESSION.
     */
    @Test
    void list_transactions_filters_by_transactional_id_pattern() throws Exception {
        for (String id : List.of("pattern-a-1", "pattern-a-2", "other-pattern-a")) {
            try (KafkaProducer<String, String> producer = transactionalProducer(id, 60_000)) {
                producer.initTransactions();
            }
        }
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            var listed = admin.listTransactions(new ListTransactionsOptions().filterOnTransactionalIdPattern("pattern-a-.*"))
                    .all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(Set.of("pattern-a-1", "pattern-a-2"),
                    listed.stream().map(t -> t.transactionalId()).collect(Collectors.toSet()));
            var bad = admin.listTransactions(new ListTransactionsOptions().filterOnTransactionalIdPattern("pattern-(")).all();
            var thrown = assertThrows(ExecutionException.class, () -> bad.get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            assertTrue(thrown.getCause() instanceof InvalidRegularExpression, thrown.toString());
        }
    }

    // ----- Kafka's TransactionalMessageCopier -------------------------------------------------

    @Test
    void message_copier_with_random_aborts_copies_every_message_exactly_once() throws Exception {
        int messages = 20_000;
        String input = "tx-copy-in";
        String output = "tx-copy-out";
        setUpCopy(input, output, messages);

        CommittedReader reader = new CommittedReader(output, messages);
        KafkaTool.Result copied = KafkaTool.run(COPIER, copierArgs(input, output, "tx-copier", "tx-copier-group"), null,
                COPIER_TIMEOUT);
        copied.assertSuccess();
        assertTrue(copied.stdout().contains("\"stage\":\"ShutdownComplete\""), copied.describe());
        assertEquals(messages, lastTotalProcessed(copied.stdout()), copied.describe());

        assertExactlyOnceInOrder(reader.await(), messages, "read_committed while the copier ran\n" + copied.describe());
        assertCopiedExactlyOnce(output, messages, "tx-copier-group", input, copied.describe());
    }

    @Test
    void message_copier_killed_mid_way_and_restarted_still_copies_every_message_exactly_once() throws Exception {
        int messages = 10_000;
        String input = "tx-kill-in";
        String output = "tx-kill-out";
        String transactionalId = "tx-kill-copier";
        String group = "tx-kill-group";
        setUpCopy(input, output, messages);
        CommittedReader reader = new CommittedReader(output, messages);

        Path dir = Files.createTempDirectory("copier-");
        Path stdout = dir.resolve("stdout");
        Process first = new ProcessBuilder(javaCommand(COPIER, copierArgs(input, output, transactionalId, group)))
                .redirectOutput(stdout.toFile())
                .redirectError(dir.resolve("stderr").toFile())
                .start();
        long processed = 0;
        long deadline = System.nanoTime() + COPIER_TIMEOUT.toNanos();
        try {
            // Killed once a third is copied: its current transaction is open at that moment.
            while (processed < messages / 3) {
                if (!first.isAlive()) {
                    fail("the copier exited with " + first.exitValue() + " before it was killed:\n"
                            + Files.readString(stdout) + "\n" + Files.readString(dir.resolve("stderr")));
                }
                if (System.nanoTime() > deadline) {
                    fail("the copier processed only " + processed + " messages in " + COPIER_TIMEOUT);
                }
                Thread.sleep(20);
                processed = lastTotalProcessed(Files.readString(stdout, StandardCharsets.UTF_8));
            }
        } finally {
            first.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        assertTrue(processed < messages, "killed too late to be mid-way: " + processed);

        KafkaTool.Result resumed = KafkaTool.run(COPIER, copierArgs(input, output, transactionalId, group), null,
                COPIER_TIMEOUT);
        resumed.assertSuccess();
        long secondRun = lastTotalProcessed(resumed.stdout());
        assertTrue(secondRun > 0 && secondRun <= messages - processed,
                "the restarted copier resumes from the committed offset: it copied " + secondRun
                        + " after the first copied " + processed + "\n" + resumed.describe());

        assertExactlyOnceInOrder(reader.await(), messages, "read_committed while the copiers ran\n" + resumed.describe());
        assertCopiedExactlyOnce(output, messages, group, input, resumed.describe());
    }

    /**
     * The broker is killed with SIGKILL while the copier runs (transaction version 2, random
     * aborts) and restarted on the same data: the copier carries on through its retries,
     * and the output holds every input record exactly once, read_committed.
     */
    @Test
    void broker_killed_mid_copy_and_restarted_loses_and_duplicates_nothing() throws Exception {
        int messages = 10_000;
        String input = "tx-crash-in";
        String output = "tx-crash-out";
        String group = "tx-crash-group";
        setUpCopy(input, output, messages);
        Path dir = Files.createTempDirectory("copier-");
        Path stdout = dir.resolve("stdout");
        Process copier = new ProcessBuilder(javaCommand(COPIER, copierArgs(input, output, "tx-crash-copier", group)))
                .redirectOutput(stdout.toFile())
                .redirectError(dir.resolve("stderr").toFile())
                .start();
        try {
            long deadline = System.nanoTime() + COPIER_TIMEOUT.toNanos();
            long processed = 0;
            while (processed < messages / 3) {
                assertTrue(copier.isAlive(), "the copier exited before the broker was killed:\n"
                        + Files.readString(stdout) + "\n" + Files.readString(dir.resolve("stderr")));
                assertTrue(System.nanoTime() < deadline, "the copier processed only " + processed);
                Thread.sleep(20);
                processed = lastTotalProcessed(Files.readString(stdout, StandardCharsets.UTF_8));
            }
            assertTrue(processed < messages, "killed too late to be mid-way: " + processed);
            BROKER.kill9AndRestart();
            assertTrue(BROKER.log().contains("unclean shutdown, recovery ran"), "no recovery after the kill");
            assertTrue(copier.waitFor(COPIER_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS),
                    "the copier did not finish after the restart:\n" + Files.readString(stdout));
        } finally {
            copier.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        String out = Files.readString(stdout, StandardCharsets.UTF_8);
        assertEquals(0, copier.exitValue(), out + "\n" + Files.readString(dir.resolve("stderr")));
        assertEquals(messages, lastTotalProcessed(out), out);
        assertCopiedExactlyOnce(output, messages, group, input, out);
    }

    // ----- kafka-transactions.sh ----------------------------------------------------------------

    @Test
    void transactions_command_lists_describes_and_aborts_an_open_transaction() throws Exception {
        String topic = "tx-hanging";
        String transactionalId = "tx-hanging-id";
        createTopic(topic, 2);
        KafkaProducer<String, String> producer = transactionalProducer(transactionalId, 120_000);
        try {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "before"));
            producer.commitTransaction();

            // Left open: three records on partition 0 and one on partition 1.
            producer.beginTransaction();
            RecordMetadata first = producer.send(new ProducerRecord<>(topic, 0, null, "open-0"))
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            producer.send(new ProducerRecord<>(topic, 0, null, "open-1"));
            producer.send(new ProducerRecord<>(topic, 0, null, "open-2"));
            producer.send(new ProducerRecord<>(topic, 1, null, "open-p1"));
            producer.flush();
            long startOffset = first.offset();
            assertEquals(2L, startOffset, "'before' at 0, its commit marker at 1");

            KafkaTool.Result list = transactions("list");
            Map<String, String> listed = rowWhere(list, "TransactionalId", transactionalId);
            assertEquals("Ongoing", listed.get("TransactionState"), list.describe());
            assertEquals(String.valueOf(BROKER.nodeId()), listed.get("Coordinator"), list.describe());
            String producerId = listed.get("ProducerId");

            KafkaTool.Result described = transactions("describe", "--transactional-id", transactionalId);
            Map<String, String> txn = rowWhere(described, "TransactionalId", transactionalId);
            assertEquals("Ongoing", txn.get("TransactionState"), described.describe());
            assertEquals(producerId, txn.get("ProducerId"), described.describe());
            assertEquals(java.util.Set.of(topic + "-0", topic + "-1"),
                    java.util.Set.of(txn.get("TopicPartitions").split(",")), described.describe());
            assertEquals("120000", txn.get("TransactionTimeoutMs"), described.describe());
            assertEquals(String.valueOf(BROKER.nodeId()), txn.get("CoordinatorId"), described.describe());

            KafkaTool.Result producers0 = transactions("describe-producers", "--topic", topic, "--partition", "0");
            Map<String, String> state0 = rowWhere(producers0, "ProducerId", producerId);
            assertEquals(String.valueOf(startOffset), state0.get("CurrentTransactionStartOffset"), producers0.describe());
            assertEquals(txn.get("ProducerEpoch"), state0.get("ProducerEpoch"), producers0.describe());
            KafkaTool.Result producers1 = transactions("describe-producers", "--topic", topic, "--partition", "1");
            Map<String, String> state1 = rowWhere(producers1, "ProducerId", producerId);
            assertEquals("0", state1.get("CurrentTransactionStartOffset"), producers1.describe());

            // The open transaction holds read_committed consumers at its first offsets.
            assertEquals(Map.of(0, startOffset, 1, 0L), endOffsets(topic, 2, "read_committed"));
            assertEquals(Map.of(0, List.of("before")), valuesByPartition(readToEnd(topic, 2, "read_committed")));

            // Partition 0 the 3.0+ way (by start offset), partition 1 the older way (by
            // producer id, epoch and coordinator epoch, as describe-producers shows them).
            transactions("abort", "--topic", topic, "--partition", "0", "--start-offset", String.valueOf(startOffset));
            transactions("abort", "--topic", topic, "--partition", "1", "--producer-id", producerId,
                    "--producer-epoch", state1.get("ProducerEpoch"),
                    "--coordinator-epoch", state1.get("LatestCoordinatorEpoch"));

            // Aborted: nothing holds them back any more, and the open records stay invisible.
            Map<Integer, Long> highWatermark = endOffsets(topic, 2, "read_uncommitted");
            assertEquals(Map.of(0, startOffset + 3 + 1, 1, 1L + 1), highWatermark, "the records and an abort marker each");
            assertEquals(highWatermark, endOffsets(topic, 2, "read_committed"));
            assertEquals(Map.of(0, List.of("before")), valuesByPartition(readToEnd(topic, 2, "read_committed")));
            assertEquals(Map.of(0, List.of("before", "open-0", "open-1", "open-2"), 1, List.of("open-p1")),
                    valuesByPartition(readToEnd(topic, 2, "read_uncommitted")));
            for (String partition : List.of("0", "1")) {
                KafkaTool.Result after = transactions("describe-producers", "--topic", topic, "--partition", partition);
                assertEquals("None", rowWhere(after, "ProducerId", producerId).get("CurrentTransactionStartOffset"),
                        after.describe());
            }

            // The producer, unaware, ends its transaction as it would anyway: it stays invisible.
            producer.abortTransaction();
            assertEquals(Map.of(0, List.of("before")), valuesByPartition(readToEnd(topic, 2, "read_committed")));
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
    }

    // ----- helpers ---------------------------------------------------------------------------

    private static KafkaProducer<String, String> transactionalProducer(String transactionalId, int timeoutMs) {
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(timeoutMs));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    /** An input topic with {@code messages} records "m-0", "m-1", ... and an empty output topic. */
    private static void setUpCopy(String input, String output, int messages) throws Exception {
        createTopic(input, 1);
        createTopic(output, 1);
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < messages; i++) {
                producer.send(new ProducerRecord<>(input, 0, "k" + i, "m-" + i));
            }
            producer.flush();
        }
        assertEquals(Map.of(0, (long) messages), endOffsets(input, 1, "read_uncommitted"));
    }

    private static List<String> copierArgs(String input, String output, String transactionalId, String group) {
        return List.of("--broker-list", BROKER.bootstrapServers(),
                "--input-topic", input, "--input-partition", "0",
                "--output-topic", output,
                "--transactional-id", transactionalId,
                "--consumer-group", group,
                "--transaction-size", "200",
                // Short, so that a killed copier's open transaction is aborted within the test.
                "--transaction-timeout", "10000",
                "--enable-random-aborts",
                "--use-group-metadata");
    }

    /**
     * The output, read_committed, holds each input record exactly once; aborted copies are
     * there read_uncommitted (so aborts did happen); the group's offset is the input's end.
     */
    private static void assertCopiedExactlyOnce(String output, int messages, String group, String input, String copierOutput)
            throws Exception {
        List<String> values = readToEnd(output, 1, "read_committed").stream().map(ConsumerRecord::value).toList();
        assertExactlyOnceInOrder(values, messages, "read_committed afterwards\n" + copierOutput);

        int uncommitted = readToEnd(output, 1, "read_uncommitted").size();
        assertTrue(uncommitted > messages, "no aborted copies stored (" + uncommitted + "): random aborts did not happen");

        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals((long) messages, offsets.get(new TopicPartition(input, 0)).offset(), "group offset: " + offsets);
        }
    }

    /** Each input record "m-0" ... exactly once, in input order (the copier keeps it per partition). */
    private static void assertExactlyOnceInOrder(List<String> values, int messages, String context) {
        Map<String, Long> counts = values.stream().collect(Collectors.groupingBy(v -> v, Collectors.counting()));
        List<String> duplicated = counts.entrySet().stream().filter(e -> e.getValue() > 1).map(Map.Entry::getKey)
                .sorted().limit(20).toList();
        List<String> missing = IntStream.range(0, messages).mapToObj(i -> "m-" + i).filter(v -> !counts.containsKey(v))
                .limit(20).toList();
        assertTrue(duplicated.isEmpty() && missing.isEmpty() && values.size() == messages,
                values.size() + " records for " + messages + " input; duplicated (first 20) " + duplicated
                        + ", missing (first 20) " + missing + "; " + context);
        assertEquals(IntStream.range(0, messages).mapToObj(i -> "m-" + i).toList(), values, "output order; " + context);
    }

    /**
     * A read_committed consumer of an output topic's partition 0, polling from the beginning
     * in its own thread while the copier runs, until it has {@code expected} records (and
     * half a second more, for extras).
     */
    private static final class CommittedReader {
        private final List<String> values = java.util.Collections.synchronizedList(new ArrayList<>());
        private final Thread thread;
        private volatile Throwable error;

        CommittedReader(String topic, int expected) {
            thread = new Thread(() -> {
                try (KafkaConsumer<String, String> c = consumer("read_committed")) {
                    TopicPartition tp = new TopicPartition(topic, 0);
                    c.assign(List.of(tp));
                    c.seekToBeginning(List.of(tp));
                    long deadline = System.nanoTime() + COPIER_TIMEOUT.multipliedBy(2).toNanos();
                    while (values.size() < expected && System.nanoTime() < deadline) {
                        c.poll(Duration.ofMillis(100)).forEach(r -> values.add(r.value()));
                    }
                    c.poll(Duration.ofMillis(500)).forEach(r -> values.add(r.value()));
                } catch (Throwable t) {
                    error = t;
                }
            }, "committed-reader-" + topic);
            thread.setDaemon(true);
            thread.start();
        }

        List<String> await() throws InterruptedException {
            thread.join(CLIENT_TIMEOUT.toMillis());
            assertTrue(!thread.isAlive(), "the read_committed reader did not finish; it has " + values.size() + " records");
            if (error != null) {
                throw new AssertionError("the read_committed reader failed", error);
            }
            return List.copyOf(values);
        }
    }

    private static long lastTotalProcessed(String copierStdout) {
        long last = 0;
        Matcher m = TOTAL_PROCESSED.matcher(copierStdout);
        while (m.find()) {
            last = Long.parseLong(m.group(1));
        }
        return last;
    }

    /** The command line KafkaTool uses, for a tool this test must kill itself. */
    private static List<String> javaCommand(String mainClass, List<String> args) {
        List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", System.getProperty("java.class.path"),
                mainClass));
        command.addAll(args);
        return command;
    }

    private static KafkaConsumer<String, String> consumer(String isolation) {
        Properties props = BROKER.clientProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000");
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private static List<TopicPartition> partitions(String topic, int count) {
        return IntStream.range(0, count).mapToObj(p -> new TopicPartition(topic, p)).toList();
    }

    /** ListOffsets latest as {@code isolation} sees it: the high watermark, or the last stable offset. */
    private static Map<Integer, Long> endOffsets(String topic, int count, String isolation) {
        try (KafkaConsumer<String, String> c = consumer(isolation)) {
            Map<Integer, Long> ends = new TreeMap<>();
            c.endOffsets(partitions(topic, count), CLIENT_TIMEOUT).forEach((tp, end) -> ends.put(tp.partition(), end));
            return ends;
        }
    }

    /** Every record from the beginning up to the end offsets as {@code isolation} sees them. */
    private static List<ConsumerRecord<String, String>> readToEnd(String topic, int count, String isolation) {
        List<TopicPartition> tps = partitions(topic, count);
        List<ConsumerRecord<String, String>> read = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(isolation)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, CLIENT_TIMEOUT);
            long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
            while (tps.stream().anyMatch(tp -> c.position(tp, CLIENT_TIMEOUT) < ends.get(tp))) {
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> at = new HashMap<>();
                    tps.forEach(tp -> at.put(tp, c.position(tp)));
                    fail(isolation + " consumer of " + topic + " at " + at + ", not at the end " + ends + " within "
                            + CLIENT_TIMEOUT);
                }
                c.poll(Duration.ofMillis(200)).forEach(read::add);
            }
            c.poll(Duration.ofMillis(300)).forEach(read::add);
        }
        return read;
    }

    private static Map<Integer, List<String>> valuesByPartition(List<ConsumerRecord<String, String>> records) {
        Map<Integer, List<String>> out = new TreeMap<>();
        for (ConsumerRecord<String, String> r : records) {
            out.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r.value());
        }
        return out;
    }

    private static KafkaTool.Result transactions(String... rest) throws IOException, InterruptedException {
        List<String> args = new ArrayList<>(List.of("--bootstrap-server", BROKER.bootstrapServers()));
        args.addAll(List.of(rest));
        return KafkaTool.run(TRANSACTIONS_COMMAND, args).assertSuccess();
    }

    /**
     * The row of the tool's table whose {@code column} is {@code value}. The table is a line
     * of column names, then rows; columns are separated by runs of spaces.
     */
    private static Map<String, String> rowWhere(KafkaTool.Result result, String column, String value) {
        List<Map<String, String>> found = result.rows(l -> List.of(l.trim().split("\\s+")).contains(column))
                .stream().filter(row -> value.equals(row.get(column))).toList();
        assertEquals(1, found.size(), "rows with " + column + " " + value + "\n" + result.describe());
        return found.get(0);
    }
}
