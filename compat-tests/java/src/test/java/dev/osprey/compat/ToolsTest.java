package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka's own command-line tools (what {@code bin/kafka-topics.sh} and friends run), each
 * as a separate JVM against the broker, checking exit codes and the lines they print.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ToolsTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand";
    private static final String CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand";
    private static final String GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell";
    private static final String CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer";
    private static final String CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    private static final String PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance";
    private static final String CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance";
    /** ApiVersions keys of the APIs a consumer group needs. */
    private static final short FIND_COORDINATOR = 10;
    private static final short JOIN_GROUP = 11;

    @Test
    void topic_command_creates_describes_alters_lists_and_deletes() throws Exception {
        String topic = "tools-topics";
        KafkaTool.Result created = topics("--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
                "--config", "retention.ms=7200000");
        assertEquals(List.of("Created topic " + topic + "."), created.stdoutLines(), created.describe());

        KafkaTool.Result list = topics("--list");
        assertTrue(list.stdoutLines().contains(topic), list.describe());

        assertDescribed(topic, 2, topics("--describe", "--topic", topic));

        KafkaTool.Result altered = topics("--alter", "--topic", topic, "--partitions", "3");
        assertEquals("", altered.stdout().strip(), altered.describe());
        assertDescribed(topic, 3, topics("--describe", "--topic", topic));

        KafkaTool.Result deleted = topics("--delete", "--topic", topic);
        assertEquals("", deleted.stdout().strip(), deleted.describe());
        KafkaTool.Result after = topics("--list");
        assertFalse(after.stdoutLines().contains(topic), after.describe());
    }

    @Test
    void config_command_alters_describes_and_deletes_topic_overrides() throws Exception {
        String topic = "tools-configs";
        topics("--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1");

        KafkaTool.Result altered = configs("--alter", "--entity-type", "topics", "--entity-name", topic,
                "--add-config", "retention.ms=120000,max.message.bytes=65536");
        assertEquals(List.of("Completed updating config for topic " + topic + "."), altered.stdoutLines(), altered.describe());

        KafkaTool.Result described = configs("--describe", "--entity-type", "topics", "--entity-name", topic);
        List<String> lines = described.stdoutLines();
        assertEquals("Dynamic configs for topic " + topic + " are:", lines.get(0), described.describe());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("  retention.ms=120000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=120000")),
                described.describe());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("  max.message.bytes=65536 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=65536")),
                described.describe());
        assertEquals(3, lines.size(), "header and two dynamic configs\n" + described.describe());

        KafkaTool.Result removed = configs("--alter", "--entity-type", "topics", "--entity-name", topic,
                "--delete-config", "retention.ms");
        assertEquals(List.of("Completed updating config for topic " + topic + "."), removed.stdoutLines(), removed.describe());
        KafkaTool.Result remaining = configs("--describe", "--entity-type", "topics", "--entity-name", topic);
        assertEquals(2, remaining.stdoutLines().size(), remaining.describe());
        assertTrue(remaining.stdoutLines().get(1).startsWith("  max.message.bytes=65536 "), remaining.describe());
    }

    @Test
    void config_command_describes_all_broker_configs() throws Exception {
        String broker = String.valueOf(BROKER.nodeId());
        KafkaTool.Result all = configs("--describe", "--entity-type", "brokers", "--entity-name", broker, "--all");
        List<String> lines = all.stdoutLines();
        assertEquals("All configs for broker " + broker + " are:", lines.get(0), all.describe());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("  num.partitions=1 sensitive=false")), all.describe());
    }

    @Test
    void console_producer_then_console_consumer_round_trip_keyed_lines() throws Exception {
        String topic = "tools-console";
        topics("--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1");
        int n = 50;
        List<String> lines = IntStream.range(0, n).mapToObj(i -> "key" + i + ":value " + i).toList();

        KafkaTool.Result produced = KafkaTool.run(CONSOLE_PRODUCER, List.of("--bootstrap-server", BROKER.bootstrapServers(),
                "--topic", topic, "--reader-property", "parse.key=true", "--reader-property", "key.separator=:"),
                String.join("\n", lines) + "\n", Duration.ofSeconds(60)).assertSuccess();
        assertEquals("", produced.stdout().strip(), produced.describe());
        assertEquals(List.of(topic + ":0:" + n), offsets(topic, "-1"));

        // With --partition the tool assigns rather than subscribes, and --from-beginning seeks
        // to the start, so it needs no group coordinator (it still sets a random group.id).
        KafkaTool.Result consumed = KafkaTool.run(CONSOLE_CONSUMER, List.of("--bootstrap-server", BROKER.bootstrapServers(),
                "--topic", topic, "--partition", "0", "--from-beginning", "--max-messages", String.valueOf(n),
                "--timeout-ms", "30000", "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:"),
                null, Duration.ofSeconds(60)).assertSuccess();
        assertEquals(lines, consumed.stdoutLines(), consumed.describe());
        assertTrue(consumed.stderr().contains("Processed a total of " + n + " messages"), consumed.describe());
    }

    @Test
    void console_consumer_from_beginning_subscribed_in_a_group() throws Exception {
        assumeGroupsServed();
        String topic = "tools-console-group";
        topics("--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1");
        int n = 20;
        List<String> lines = IntStream.range(0, n).mapToObj(i -> "line " + i).toList();
        KafkaTool.run(CONSOLE_PRODUCER, List.of("--bootstrap-server", BROKER.bootstrapServers(), "--topic", topic),
                String.join("\n", lines) + "\n", Duration.ofSeconds(60)).assertSuccess();
        KafkaTool.Result consumed = KafkaTool.run(CONSOLE_CONSUMER, List.of("--bootstrap-server", BROKER.bootstrapServers(),
                "--topic", topic, "--from-beginning", "--max-messages", String.valueOf(n), "--timeout-ms", "30000"),
                null, Duration.ofSeconds(60)).assertSuccess();
        assertEquals(lines, consumed.stdoutLines(), consumed.describe());
        assertTrue(consumed.stderr().contains("Processed a total of " + n + " messages"), consumed.describe());
    }

    @Test
    void get_offset_shell_prints_earliest_latest_and_by_time() throws Exception {
        String topic = "tools-offsets";
        topics("--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1");
        // Five lines to each partition, by key: the console producer's default partitioner
        // hashes keys, so the split is counted afterwards rather than assumed.
        KafkaTool.run(CONSOLE_PRODUCER, List.of("--bootstrap-server", BROKER.bootstrapServers(), "--topic", topic,
                "--reader-property", "parse.key=true", "--reader-property", "key.separator=:"),
                String.join("\n", IntStream.range(0, 10).mapToObj(i -> "k" + i + ":v" + i).toList()) + "\n",
                Duration.ofSeconds(60)).assertSuccess();

        List<String> latest = offsets(topic, "-1");
        assertEquals(2, latest.size(), String.valueOf(latest));
        long total = 0;
        for (int p = 0; p < 2; p++) {
            String prefix = topic + ":" + p + ":";
            assertTrue(latest.get(p).startsWith(prefix), latest.toString());
            total += Long.parseLong(latest.get(p).substring(prefix.length()));
        }
        assertEquals(10, total, "records across partitions: " + latest);
        assertEquals(List.of(topic + ":0:0", topic + ":1:0"), offsets(topic, "-2"));
        // A timestamp older than every record: the first offset of each partition.
        assertEquals(List.of(topic + ":0:0", topic + ":1:0"), offsets(topic, "0"));
        // -3 is max-timestamp: a record exists in each non-empty partition.
        List<String> maxTimestamp = offsets(topic, "-3");
        assertEquals(2, maxTimestamp.size(), String.valueOf(maxTimestamp));
    }

    @Test
    void producer_performance_sends_every_record() throws Exception {
        String topic = "tools-perf";
        topics("--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1");
        int n = 20_000;
        KafkaTool.Result perf = KafkaTool.run(PRODUCER_PERFORMANCE, List.of("--bootstrap-server", BROKER.bootstrapServers(),
                "--topic", topic, "--num-records", String.valueOf(n), "--record-size", "100", "--throughput", "-1"),
                null, Duration.ofSeconds(120)).assertSuccess();
        Matcher summary = Pattern.compile("(?m)^(\\d+) records sent, [0-9.]+ records/sec \\([0-9.]+ MB/sec\\), "
                + "[0-9.]+ ms avg latency, [0-9.]+ ms max latency, \\d+ ms 50th, \\d+ ms 95th, \\d+ ms 99th, \\d+ ms 99.9th\\.$")
                .matcher(perf.stdout());
        assertTrue(summary.find(), perf.describe());
        assertEquals(n, Integer.parseInt(summary.group(1)), perf.describe());
        long stored = offsets(topic, "-1").stream().mapToLong(l -> Long.parseLong(l.substring(l.lastIndexOf(':') + 1))).sum();
        assertEquals(n, stored, "end offsets after ProducerPerformance");
    }

    @Test
    void consumer_performance_reads_every_record() throws Exception {
        // ConsumerPerformance always subscribes, so it needs the group coordinator.
        assumeGroupsServed();
        String topic = "tools-consumer-perf";
        topics("--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1");
        int n = 20_000;
        KafkaTool.run(PRODUCER_PERFORMANCE, List.of("--bootstrap-server", BROKER.bootstrapServers(), "--topic", topic,
                "--num-records", String.valueOf(n), "--record-size", "100", "--throughput", "-1"),
                null, Duration.ofSeconds(120)).assertSuccess();
        KafkaTool.Result perf = KafkaTool.run(CONSUMER_PERFORMANCE, List.of("--bootstrap-server", BROKER.bootstrapServers(),
                "--topic", topic, "--num-records", String.valueOf(n), "--timeout", "30000"),
                null, Duration.ofSeconds(120)).assertSuccess();
        List<String> lines = perf.stdoutLines();
        assertTrue(lines.get(0).startsWith("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg"), perf.describe());
        String[] fields = lines.get(lines.size() - 1).split(", ");
        assertEquals(n, Long.parseLong(fields[4]), "data.consumed.in.nMsg\n" + perf.describe());
    }

    private static void assertDescribed(String topic, int partitions, KafkaTool.Result described) {
        described.assertSuccess();
        List<String> lines = described.stdoutLines();
        assertEquals(1 + partitions, lines.size(), described.describe());
        assertTrue(Pattern.matches("Topic: " + topic + "\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: " + partitions
                + "\tReplicationFactor: 1\tConfigs: .*retention\\.ms=7200000.*", lines.get(0)), described.describe());
        String node = String.valueOf(BROKER.nodeId());
        for (int p = 0; p < partitions; p++) {
            String expected = "\tTopic: " + topic + "\tPartition: " + p + "\tLeader: " + node + "\tReplicas: " + node
                    + "\tIsr: " + node + "\tElr: ";
            assertTrue(lines.get(1 + p).startsWith(expected), "partition " + p + "\n" + described.describe());
        }
    }

    private static KafkaTool.Result topics(String... args) throws Exception {
        return tool(TOPIC_COMMAND, args);
    }

    private static KafkaTool.Result configs(String... args) throws Exception {
        return tool(CONFIG_COMMAND, args);
    }

    private static List<String> offsets(String topic, String time) throws Exception {
        return tool(GET_OFFSET_SHELL, "--topic", topic, "--time", time).stdoutLines().stream().sorted().toList();
    }

    /** Runs {@code mainClass --bootstrap-server B args} and requires exit 0. */
    private static KafkaTool.Result tool(String mainClass, String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", BROKER.bootstrapServers()));
        all.addAll(List.of(args));
        return KafkaTool.run(mainClass, all).assertSuccess();
    }

    private static void assumeGroupsServed() {
        assumeTrue(BROKER.advertises(FIND_COORDINATOR) && BROKER.advertises(JOIN_GROUP),
                "the broker does not advertise FindCoordinator (10) and JoinGroup (11) yet: consumer groups are not served");
    }
}
