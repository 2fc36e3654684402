package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
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
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka's own {@code TransactionalMessageCopier} (the tool Kafka's system tests run in
 * transactions_test.py) on a 3-node Osprey cluster: one copier per input partition, each
 * consuming read_committed and producing its copy in transactions that carry its consumed
 * offsets (sendOffsetsToTransaction with the consumer's group metadata), a third of them
 * aborted on purpose ({@code --enable-random-aborts}), while each node in turn is killed
 * with SIGKILL and started again once the copiers went on without it.
 *
 * <p>Exactly once is the output read read_committed: each output partition holds its
 * input partition's messages, each once, in order; and the last stable offset reaches the
 * high watermark (no transaction left open).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class TransactionalCopierFailoverTest {
    /** A dead node is fenced 3 s after its last heartbeat (Kafka: 9 s), so its partitions move within seconds. */
    @RegisterExtension
    static final OspreyCluster CLUSTER = new OspreyCluster(Map.of(
            "broker.session.timeout.ms", "3000",
            "broker.heartbeat.interval.ms", "500"));

    private static final String COPIER = "org.apache.kafka.tools.TransactionalMessageCopier";
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    /** After the last restart the copiers finish what is left; normally in seconds. */
    private static final Duration FINISH_TIMEOUT = Duration.ofSeconds(120);
    private static final int PARTITIONS = 3;
    private static final int PER_PARTITION = 4_000;
    /** Small transactions: many of them, so that every kill lands in the middle of some. */
    private static final int TRANSACTION_SIZE = 20;
    /** How many more messages the copiers must commit while a node is down. */
    private static final int PROGRESS_WITHOUT_A_NODE = 300;
    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    void copiers_copy_each_message_exactly_once_while_nodes_are_killed_one_at_a_time() throws Exception {
        String input = "copier-input";
        String output = "copier-output";
        try (Admin admin = CLUSTER.admin()) {
            admin.createTopics(List.of(replicated(input), replicated(output))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            CLUSTER.awaitAllInSync(admin);
        }
        Map<Integer, List<String>> sent = produceInput(input);
        long total = (long) PARTITIONS * PER_PARTITION;
        Path workDir = Files.createTempDirectory("copiers-");
        List<Copier> copiers = new ArrayList<>();
        List<String> rounds = new ArrayList<>();
        try {
            for (int p = 0; p < PARTITIONS; p++) {
                copiers.add(Copier.start(input, p, output, workDir));
            }
            try (Admin admin = CLUSTER.admin()) {
                for (OspreyCluster.Node node : CLUSTER.nodes()) {
                    long before = awaitCopied(copiers, total * node.id / 5);
                    assertTrue(before < total, "the copiers finished before " + node + " was killed: "
                            + "too little input for this machine (" + rounds + ")");
                    long killedAt = System.nanoTime();
                    node.kill9();
                    long without = awaitCopied(copiers, Math.min(total, before + PROGRESS_WITHOUT_A_NODE));
                    double resumedAfter = (System.nanoTime() - killedAt) / 1e9;
                    node.start();
                    CLUSTER.awaitBrokers();
                    CLUSTER.awaitAllInSync(admin);
                    rounds.add(String.format("%s killed at %d copied, %d copied %.1f s later, back in sync at %d",
                            node, before, without, resumedAfter, copied(copiers)));
                }
            }
            for (Copier c : copiers) {
                c.awaitExit(FINISH_TIMEOUT);
            }
        } finally {
            copiers.forEach(Copier::destroy);
        }
        System.out.println("TransactionalMessageCopier through kills: " + String.join("; ", rounds));

        Map<Integer, List<String>> copied = readCommitted(output);
        for (int p = 0; p < PARTITIONS; p++) {
            List<String> got = copied.getOrDefault(p, List.of());
            if (!got.equals(sent.get(p))) {
                fail("output partition " + p + ": " + got.size() + " messages read_committed, " + sent.get(p).size()
                        + " in the input; first difference " + firstDifference(sent.get(p), got));
            }
        }
    }

    private static NewTopic replicated(String name) {
        return new NewTopic(name, PARTITIONS, (short) 3).configs(Map.of("min.insync.replicas", "2"));
    }

    /** PER_PARTITION messages "p:i" to each partition p, idempotent and acks=all; each must succeed. */
    private static Map<Integer, List<String>> produceInput(String topic) throws Exception {
        Properties props = CLUSTER.clientProps();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        Map<Integer, List<String>> sent = new HashMap<>();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int p = 0; p < PARTITIONS; p++) {
                for (int i = 0; i < PER_PARTITION; i++) {
                    String value = p + ":" + i;
                    sent.computeIfAbsent(p, k -> new ArrayList<>()).add(value);
                    acks.add(producer.send(new ProducerRecord<>(topic, p, "k" + (i % 10), value)));
                }
            }
            producer.flush();
        }
        for (Future<RecordMetadata> ack : acks) {
            ack.get(); // throws if a send failed
        }
        return sent;
    }

    /** Until the copiers together committed {@code target} messages; returns how many they did. */
    private static long awaitCopied(List<Copier> copiers, long target) throws Exception {
        long deadline = System.nanoTime() + OspreyCluster.WAIT.toNanos();
        while (true) {
            for (Copier c : copiers) {
                c.failIfExitedBadly();
            }
            long now = copied(copiers);
            if (now >= target) {
                return now;
            }
            if (System.nanoTime() > deadline) {
                fail("the copiers committed " + now + " messages, not " + target + ", within " + OspreyCluster.WAIT
                        + "\n" + copiers.stream().map(Copier::describe).reduce("", String::concat));
            }
            Thread.sleep(100);
        }
    }

    private static long copied(List<Copier> copiers) throws IOException {
        long total = 0;
        for (Copier c : copiers) {
            total += c.totalProcessed();
        }
        return total;
    }

    /** Each partition's values read read_committed, until the position reaches the high watermark. */
    private static Map<Integer, List<String>> readCommitted(String topic) {
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).toList();
        Map<TopicPartition, Long> highWatermarks;
        Properties uncommitted = CLUSTER.clientProps();
        try (KafkaConsumer<String, String> c =
                new KafkaConsumer<>(uncommitted, new StringDeserializer(), new StringDeserializer())) {
            highWatermarks = c.endOffsets(tps, CLIENT_TIMEOUT);
        }
        Properties props = CLUSTER.clientProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        Map<Integer, List<String>> values = new HashMap<>();
        try (KafkaConsumer<String, String> c =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + OspreyCluster.WAIT.toNanos();
            while (tps.stream().anyMatch(tp -> c.position(tp, CLIENT_TIMEOUT) < highWatermarks.get(tp))) {
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> at = new HashMap<>();
                    tps.forEach(tp -> at.put(tp, c.position(tp)));
                    fail("read_committed at " + at + ", not at the high watermarks " + highWatermarks + " within "
                            + OspreyCluster.WAIT + ": a transaction left open, or its markers never written");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                }
            }
        }
        return values;
    }

    private static String firstDifference(List<String> expected, List<String> got) {
        for (int i = 0; i < Math.min(expected.size(), got.size()); i++) {
            if (!expected.get(i).equals(got.get(i))) {
                return "at " + i + ": expected " + expected.get(i) + ", got " + got.get(i);
            }
        }
        return expected.size() > got.size() ? "missing from " + got.size() + ": " + expected.get(got.size())
                : got.size() > expected.size() ? "extra from " + expected.size() + ": " + got.get(expected.size())
                : "none";
    }

    /** One TransactionalMessageCopier JVM copying one input partition; its JSON status lines on stdout. */
    private static final class Copier {
        private final int partition;
        private final Process process;
        private final Path stdout;
        private final Path stderr;

        private Copier(int partition, Process process, Path stdout, Path stderr) {
            this.partition = partition;
            this.process = process;
            this.stdout = stdout;
            this.stderr = stderr;
        }

        static Copier start(String input, int partition, String output, Path dir) throws IOException {
            Path out = dir.resolve("copier-" + partition + ".out");
            Path err = dir.resolve("copier-" + partition + ".err");
            Process process = KafkaTool.start(COPIER, List.of(
                    "--broker-list", CLUSTER.bootstrapServers(),
                    "--input-topic", input,
                    "--input-partition", Integer.toString(partition),
                    "--output-topic", output,
                    "--transactional-id", "copier-" + partition,
                    "--consumer-group", "copiers",
                    "--transaction-size", Integer.toString(TRANSACTION_SIZE),
                    "--transaction-timeout", "30000",
                    "--use-group-metadata",
                    "--enable-random-aborts"), out, err);
            return new Copier(partition, process, out, err);
        }

        /** The last "totalProcessed" the copier printed: messages in its committed transactions. */
        long totalProcessed() throws IOException {
            List<String> lines = Files.readAllLines(stdout, StandardCharsets.UTF_8);
            for (int i = lines.size() - 1; i >= 0; i--) {
                String line = lines.get(i);
                if (line.startsWith("{") && line.contains("totalProcessed")) {
                    try {
                        JsonNode status = JSON.readTree(line);
                        return status.get("totalProcessed").asLong();
                    } catch (IOException e) {
                        // a line being written: the one before it will do
                    }
                }
            }
            return 0;
        }

        void failIfExitedBadly() {
            if (!process.isAlive() && process.exitValue() != 0) {
                fail("copier of partition " + partition + " exited with " + process.exitValue() + "\n" + describe());
            }
        }

        void awaitExit(Duration timeout) throws InterruptedException {
            if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                fail("copier of partition " + partition + " still running " + timeout + " after the last restart\n"
                        + describe());
            }
            assertEquals(0, process.exitValue(), () -> describe());
        }

        void destroy() {
            process.destroyForcibly();
        }

        String describe() {
            try {
                List<String> out = Files.readAllLines(stdout, StandardCharsets.UTF_8);
                return "--- copier " + partition + " stdout (last 5 lines)\n"
                        + String.join("\n", out.subList(Math.max(0, out.size() - 5), out.size()))
                        + "\n--- copier " + partition + " stderr\n" + Files.readString(stderr, StandardCharsets.UTF_8)
                        + "\n";
            } catch (IOException e) {
                return "(copier " + partition + " output unreadable: " + e + ")\n";
            }
        }
    }
}
