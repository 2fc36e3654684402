package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka's {@code kafka-consumer-groups.sh} (ConsumerGroupCommand) against groups with and
 * without members: {@code --list}, {@code --describe} (offsets, LAG, members, state),
 * {@code --reset-offsets}, {@code --delete-offsets} and {@code --delete}, each as its own JVM.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class GroupToolsTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    private static final int PER_PARTITION = 10;

    @Test
    void describe_shows_committed_offsets_and_lag_as_end_offset_minus_committed() throws Exception {
        String topic = "gt-describe";
        String group = "gt-describe";
        setUp(topic);
        try (KafkaConsumer<String, String> member = ConsumerGroupTest.consumer(BROKER, group, RangeAssignor.class, "gt-member")) {
            readEverything(member, topic);
            member.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(4),
                    new TopicPartition(topic, 1), new OffsetAndMetadata(7)));

            KafkaTool.Result list = groups("--list");
            assertTrue(list.stdoutLines().contains(group), list.describe());
            KafkaTool.Result stable = groups("--list", "--state", "Stable");
            assertTrue(stable.stdoutLines().stream().anyMatch(l -> l.matches(group + "\\s+Stable\\s*")), stable.describe());

            KafkaTool.Result described = groups("--describe", "--group", group);
            List<Map<String, String>> rows = table(described);
            assertEquals(2, rows.size(), described.describe());
            Map<TopicPartition, Long> endOffsets = endOffsets(topic);
            Map<Integer, Long> committed = Map.of(0, 4L, 1, 7L);
            for (Map<String, String> row : rows) {
                assertEquals(group, row.get("GROUP"), described.describe());
                assertEquals(topic, row.get("TOPIC"), described.describe());
                int partition = Integer.parseInt(row.get("PARTITION"));
                long end = endOffsets.get(new TopicPartition(topic, partition));
                assertEquals(committed.get(partition), Long.parseLong(row.get("CURRENT-OFFSET")), described.describe());
                assertEquals(end, Long.parseLong(row.get("LOG-END-OFFSET")), described.describe());
                assertEquals(end - committed.get(partition), Long.parseLong(row.get("LAG")), described.describe());
                assertNotEquals("-", row.get("CONSUMER-ID"), described.describe());
                assertEquals("gt-member", row.get("CLIENT-ID"), described.describe());
            }

            KafkaTool.Result members = groups("--describe", "--group", group, "--members");
            List<Map<String, String>> memberRows = table(members);
            assertEquals(1, memberRows.size(), members.describe());
            assertEquals("gt-member", memberRows.get(0).get("CLIENT-ID"), members.describe());
            assertEquals("2", memberRows.get(0).get("#PARTITIONS"), members.describe());

            KafkaTool.Result state = groups("--describe", "--group", group, "--state");
            Matcher m = Pattern.compile("(?m)^" + group + "\\s+\\S+\\s+\\((\\d+)\\)\\s+range\\s+Stable\\s+1\\s*$")
                    .matcher(state.stdout());
            assertTrue(m.find(), state.describe());
            assertEquals(BROKER.nodeId(), Integer.parseInt(m.group(1)), state.describe());

            // Offsets of a group with members cannot be reset, nor can the group be deleted.
            KafkaTool.Result reset = KafkaTool.run(CONSUMER_GROUP_COMMAND, args("--reset-offsets", "--group", group,
                    "--topic", topic, "--to-earliest", "--execute"));
            assertTrue(reset.stdout().contains("Assignments can only be reset if the group '" + group
                    + "' is inactive, but the current state is Stable."), reset.describe());
            KafkaTool.Result delete = KafkaTool.run(CONSUMER_GROUP_COMMAND, args("--delete", "--group", group));
            assertTrue(delete.stdout().contains("Group '" + group
                    + "' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException"), delete.describe());
        }

        // Its only member left: still listed, with the offsets, and no members.
        KafkaTool.Result empty = groups("--list", "--state", "Empty");
        assertTrue(empty.stdoutLines().stream().anyMatch(l -> l.matches(group + "\\s+Empty\\s*")), empty.describe());
        KafkaTool.Result described = groups("--describe", "--group", group);
        assertTrue(described.stderr().contains("Consumer group '" + group + "' has no active members."), described.describe());
        assertEquals(List.of("4", "7"), table(described).stream().map(r -> r.get("CURRENT-OFFSET")).toList(),
                described.describe());
    }

    @Test
    void reset_offsets_to_earliest_makes_a_member_reread_everything_and_to_offset_sets_the_offset() throws Exception {
        String topic = "gt-reset";
        String group = "gt-reset";
        setUp(topic);
        try (KafkaConsumer<String, String> member = ConsumerGroupTest.consumer(BROKER, group, RangeAssignor.class, "gt-reset-1")) {
            assertEquals(2 * PER_PARTITION, readEverything(member, topic).size());
            member.commitSync();
        }
        assertEquals(Map.of(0, 10L, 1, 10L), committed(group, topic));

        KafkaTool.Result dryRun = groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run");
        assertEquals(List.of("0", "0"), table(dryRun).stream().map(r -> r.get("NEW-OFFSET")).toList(), dryRun.describe());
        assertEquals(Map.of(0, 10L, 1, 10L), committed(group, topic), "a dry run changes nothing");

        KafkaTool.Result earliest = groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute");
        List<Map<String, String>> rows = table(earliest);
        assertEquals(List.of("0", "1"), rows.stream().map(r -> r.get("PARTITION")).toList(), earliest.describe());
        assertEquals(List.of("0", "0"), rows.stream().map(r -> r.get("NEW-OFFSET")).toList(), earliest.describe());
        assertEquals(Map.of(0, 0L, 1, 0L), committed(group, topic));

        // A member of the group now starts from the beginning again: every record, once.
        try (KafkaConsumer<String, String> member = ConsumerGroupTest.consumer(BROKER, group, RangeAssignor.class, "gt-reset-2")) {
            List<ConsumerRecord<String, String>> again = readEverything(member, topic);
            assertEquals(2 * PER_PARTITION, again.size());
            for (int p = 0; p < 2; p++) {
                final int partition = p;
                assertEquals(0L, again.stream().filter(r -> r.partition() == partition).mapToLong(ConsumerRecord::offset)
                        .min().orElseThrow(), "first offset re-read from partition " + p);
            }
            member.commitSync();
        }

        KafkaTool.Result toOffset = groups("--reset-offsets", "--group", group, "--topic", topic + ":1", "--to-offset", "6",
                "--execute");
        assertEquals(List.of("6"), table(toOffset).stream().map(r -> r.get("NEW-OFFSET")).toList(), toOffset.describe());
        assertEquals(Map.of(0, 10L, 1, 6L), committed(group, topic));
        try (KafkaConsumer<String, String> member = ConsumerGroupTest.consumer(BROKER, group, RangeAssignor.class, "gt-reset-3")) {
            List<ConsumerRecord<String, String>> rest = readUntil(member, topic, PER_PARTITION - 6);
            assertEquals(List.of(6L, 7L, 8L, 9L), rest.stream().map(ConsumerRecord::offset).toList());
            assertTrue(rest.stream().allMatch(r -> r.partition() == 1));
        }
    }

    @Test
    void delete_offsets_then_delete_removes_the_group() throws Exception {
        String topic = "gt-delete";
        String group = "gt-delete";
        setUp(topic);
        try (KafkaConsumer<String, String> member = ConsumerGroupTest.consumer(BROKER, group, RangeAssignor.class, "gt-delete-1")) {
            readEverything(member, topic);
            member.commitSync();
        }
        KafkaTool.Result deletedOffsets = groups("--delete-offsets", "--group", group, "--topic", topic + ":0");
        List<Map<String, String>> rows = table(deletedOffsets);
        assertEquals(1, rows.size(), deletedOffsets.describe());
        assertEquals("0", rows.get(0).get("PARTITION"), deletedOffsets.describe());
        assertEquals("Successful", rows.get(0).get("STATUS"), deletedOffsets.describe());
        assertEquals(Map.of(1, 10L), committed(group, topic));

        KafkaTool.Result deleted = groups("--delete", "--group", group);
        assertTrue(deleted.stdout().contains("Deletion of requested consumer groups ('" + group + "') was successful."),
                deleted.describe());
        KafkaTool.Result list = groups("--list");
        assertFalse(list.stdoutLines().contains(group), list.describe());
        assertEquals(Map.of(), committed(group, topic));

        KafkaTool.Result unknown = KafkaTool.run(CONSUMER_GROUP_COMMAND, args("--delete", "--group", "gt-no-such-group"));
        assertTrue(unknown.stdout().contains("Group 'gt-no-such-group' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException"),
                unknown.describe());
    }

    // ----- helpers ---------------------------------------------------------------------------

    /** A two-partition topic with {@value PER_PARTITION} records in each partition. */
    private static void setUp(String topic) throws Exception {
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        try (Admin admin = Admin.create(BROKER.clientProps());
                KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            for (int i = 0; i < 2 * PER_PARTITION; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, "v" + i)).get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
    }

    private static List<ConsumerRecord<String, String>> readEverything(KafkaConsumer<String, String> c, String topic) {
        return readUntil(c, topic, 2 * PER_PARTITION);
    }

    /** Subscribes and polls until {@code count} records arrived, then once more for extras. */
    private static List<ConsumerRecord<String, String>> readUntil(KafkaConsumer<String, String> c, String topic, int count) {
        c.subscribe(List.of(topic));
        List<ConsumerRecord<String, String>> read = new ArrayList<>();
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (read.size() < count && System.nanoTime() < deadline) {
            c.poll(Duration.ofMillis(200)).forEach(read::add);
        }
        c.poll(Duration.ofMillis(300)).forEach(read::add);
        assertEquals(count, read.size(), "records read from " + topic);
        return read;
    }

    private static Map<Integer, Long> committed(String group, String topic) throws Exception {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Map<Integer, Long> offsets = new HashMap<>();
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
                    .forEach((tp, om) -> {
                        if (tp.topic().equals(topic) && om != null) {
                            offsets.put(tp.partition(), om.offset());
                        }
                    });
            return offsets;
        }
    }

    private static Map<TopicPartition, Long> endOffsets(String topic) {
        try (KafkaConsumer<String, String> c = ConsumerGroupTest.consumer(BROKER, "gt-end-offsets", RangeAssignor.class, "gt-end")) {
            return c.endOffsets(List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)), CLIENT_TIMEOUT);
        }
    }

    /**
     * The tool's table: the line of upper-case column names, then one map per row, sorted by
     * topic and partition (the tool prints them in no fixed order). Columns are separated by
     * runs of spaces.
     */
    private static List<Map<String, String>> table(KafkaTool.Result result) {
        List<Map<String, String>> rows = new ArrayList<>(
                result.rows(l -> l.matches("^(GROUP|TOPIC)\\s+.*[A-Z-]+\\s*$") && l.equals(l.toUpperCase())));
        rows.sort(java.util.Comparator.comparing((Map<String, String> r) -> r.getOrDefault("TOPIC", ""))
                .thenComparing(r -> Integer.parseInt(r.getOrDefault("PARTITION", "0"))));
        return rows;
    }

    private static List<String> args(String... rest) {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", BROKER.bootstrapServers()));
        all.addAll(List.of(rest));
        return all;
    }

    /** Runs ConsumerGroupCommand with {@code args} and requires exit 0. */
    private static KafkaTool.Result groups(String... rest) throws Exception {
        return KafkaTool.run(CONSUMER_GROUP_COMMAND, args(rest)).assertSuccess();
    }
}
