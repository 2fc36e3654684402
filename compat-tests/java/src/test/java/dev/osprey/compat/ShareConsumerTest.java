package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Share groups (KIP-932) with Kafka 4.4's own {@link KafkaShareConsumer} in explicit
 * acknowledgement mode ({@code share.acknowledgement.mode=explicit}: each record
 * acknowledged ACCEPT or RELEASE, then {@code commitSync}, whose result for every
 * partition must be a success unless the test expects a refusal):
 * <ul>
 *   <li>three consumers on one partition: every record delivered, each once, to all three;
 *   <li>a released record comes back with delivery count 2, and the consumer learns the
 *       group's {@code share.record.lock.duration.ms} from the broker;
 *   <li>a member that acknowledges after its records' lock expired and another member got
 *       them is refused (INVALID_RECORD_STATE), and the records stay the other member's;
 *   <li>Kafka's {@code kafka-share-groups.sh} (ShareGroupCommand) lists and describes the
 *       group (offsets, members, state), refuses to reset or delete it while it has a
 *       member, then resets it to the earliest offsets (a new member gets every record
 *       again) and deletes it.
 * </ul>
 *
 * <p>"Delivered again" and "never delivered again" are checked without a clock: a new
 * record (the sentinel) is produced after the others and a consumer polls until it
 * arrives; a share partition hands out its available records from the lowest offset up,
 * and a consumer that closes gives back what it acquired, so a record wrongly available
 * again comes before the sentinel.
 *
 * <p>{@code -Dcompat.kafka.bootstrap=HOST:PORT} runs the tests against that broker
 * instead, to prove them against Kafka itself (a Kafka 4.4 node formatted with
 * {@code --feature share.version=2}, its default); osprey is then started but not used.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ShareConsumerTest {
    /**
     * Kafka refuses a group's {@code share.record.lock.duration.ms} below the broker's
     * {@code group.share.min.record.lock.duration.ms} (default 15000); 1000 is the lowest it
     * takes. A Kafka node the tests are proven against needs the same setting.
     */
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker(List.of("group.share.min.record.lock.duration.ms=1000"));

    private static final String KAFKA_BOOTSTRAP = System.getProperty("compat.kafka.bootstrap", "");
    private static final String SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    /** How long a test waits for deliveries that must come. */
    private static final Duration DELIVERY_WAIT = Duration.ofSeconds(60);
    private static final Duration POLL = Duration.ofMillis(200);
    private static final Duration SETTLE = Duration.ofSeconds(1);

    /** One record given to a consumer. */
    record Delivery(int consumer, long offset, int deliveryCount, String value) {}

    @Test
    void three_consumers_on_one_partition_get_every_record_each_accepted_once() throws Exception {
        String topic = "share-java-three";
        String group = topic;
        createTopic(topic, 1);
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest"));
        Map<Long, String> produced = produce(topic, 0, values(0, 3000));
        List<KafkaShareConsumer<String, String>> consumers = new ArrayList<>();
        List<Delivery> deliveries = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                consumers.add(shareConsumer(group, topic, "share-java-three-" + i));
            }
            long deadline = System.nanoTime() + DELIVERY_WAIT.toNanos();
            while (true) {
                Set<Long> delivered = offsets(deliveries).keySet();
                Set<Integer> deliveredTo = deliveries.stream().map(Delivery::consumer).collect(Collectors.toSet());
                if (delivered.containsAll(produced.keySet()) && deliveredTo.size() == consumers.size()) {
                    break;
                }
                checkDeadline(deadline, () -> "not within " + DELIVERY_WAIT + ": " + delivered.size() + " of "
                        + produced.size() + " records delivered, to consumers " + deliveredTo);
                if (delivered.containsAll(produced.keySet())) {
                    // Everything went to the consumers that joined first; more records, for the
                    // one the group has not given anything yet.
                    produced.putAll(produce(topic, 0, values(produced.size(), 300)));
                }
                for (int i = 0; i < consumers.size(); i++) {
                    pollOnce(consumers.get(i), i, r -> AcknowledgeType.ACCEPT, deliveries);
                }
            }
        } finally {
            consumers.forEach(KafkaShareConsumer::close);
        }

        Map<Long, Integer> twice = offsets(deliveries).entrySet().stream().filter(e -> e.getValue() > 1)
                .collect(Collectors.toMap(Map.Entry::getKey, Map.Entry::getValue));
        assertEquals(Map.of(), twice, "records delivered more than once");
        assertEquals(produced, deliveries.stream().collect(Collectors.toMap(Delivery::offset, Delivery::value)),
                "delivered records are not the produced ones");
        assertEquals(Set.of(1), deliveries.stream().map(Delivery::deliveryCount).collect(Collectors.toSet()));
        System.out.println(produced.size() + " records, per consumer: " + deliveries.stream()
                .collect(Collectors.groupingBy(Delivery::consumer, TreeMap::new, Collectors.counting())));
        // Closing gave back whatever a member still held: a record whose acceptance the
        // broker lost would go to the next member.
        assertOnlySentinelDelivered(group, topic, null);
    }

    @Test
    void released_records_come_back_with_delivery_count_two_under_the_groups_lock_duration() throws Exception {
        String topic = "share-java-release";
        String group = topic;
        createTopic(topic, 1);
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "20000"));
        Map<Long, String> produced = produce(topic, 0, values(0, 30));
        Map<Long, List<Integer>> expected = new TreeMap<>();
        produced.keySet().forEach(o -> expected.put(o, o % 3 == 0 ? List.of(1, 2) : List.of(1)));
        try (KafkaShareConsumer<String, String> c = shareConsumer(group, topic, "share-java-release")) {
            List<Delivery> deliveries = new ArrayList<>();
            // Released on its first delivery, accepted on the next.
            consume(c, r -> r.offset() % 3 == 0 && deliveryCount(r) == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT,
                    () -> expected.entrySet().stream().allMatch(e -> countsOf(deliveries, e.getKey()).size() >= e.getValue().size()),
                    "every record accepted, the released ones on their second delivery", deliveries);
            Map<Long, List<Integer>> counts = new TreeMap<>();
            produced.keySet().forEach(o -> counts.put(o, countsOf(deliveries, o)));
            assertEquals(expected, counts, "delivery counts by offset");
            // ShareFetch and ShareAcknowledge responses carry the group's lock duration.
            assertEquals(Optional.of(20000), c.acquisitionLockTimeoutMs());
            assertOnlySentinelDelivered(group, topic, c);
        }
    }

    @Test
    void an_acknowledgement_after_the_lock_expired_is_refused_and_the_record_goes_to_another_member() throws Exception {
        String topic = "share-java-expired";
        String group = topic;
        createTopic(topic, 1);
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "2000"));
        Map<Long, String> produced = produce(topic, 0, values(0, 10));
        try (KafkaShareConsumer<String, String> slow = shareConsumer(group, topic, "share-java-expired-slow");
                KafkaShareConsumer<String, String> other = shareConsumer(group, topic, "share-java-expired-other")) {
            List<ConsumerRecord<String, String>> held = new ArrayList<>();
            long deadline = System.nanoTime() + DELIVERY_WAIT.toNanos();
            while (held.isEmpty()) {
                checkDeadline(deadline, () -> "the first member got nothing within " + DELIVERY_WAIT);
                slow.poll(POLL).forEach(held::add);
            }
            assertEquals(Optional.of(2000), slow.acquisitionLockTimeoutMs());
            Set<Long> heldOffsets = held.stream().map(ConsumerRecord::offset).collect(Collectors.toSet());
            // `slow` neither polls nor acknowledges until its records' locks expired and the
            // other member got them, with delivery count 2.
            List<Delivery> deliveries = new ArrayList<>();
            Map<Long, List<Integer>> heldTwice = new TreeMap<>();
            heldOffsets.forEach(o -> heldTwice.put(o, List.of(2)));
            consume(other, r -> heldOffsets.contains(r.offset()) ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT,
                    () -> heldOffsets.stream().allMatch(o -> !countsOf(deliveries, o).isEmpty()),
                    "the first member's records at the other one", deliveries);
            Map<Long, List<Integer>> counts = new TreeMap<>();
            heldOffsets.forEach(o -> counts.put(o, countsOf(deliveries, o)));
            assertEquals(heldTwice, counts, "delivery counts at the other member of the records whose lock expired");

            held.forEach(r -> slow.acknowledge(r, AcknowledgeType.ACCEPT));
            Map<TopicIdPartition, Optional<KafkaException>> late = slow.commitSync(CLIENT_TIMEOUT);
            assertEquals(1, late.size(), late.toString());
            Optional<KafkaException> refused = late.values().iterator().next();
            assertTrue(refused.isPresent() && refused.get() instanceof InvalidRecordStateException, late.toString());

            // Released by the other member, they are delivered once more (count 3) and accepted.
            consume(other, r -> AcknowledgeType.ACCEPT, () -> heldOffsets.stream().allMatch(o -> countsOf(deliveries, o).size() >= 2),
                    "the released records again", deliveries);
            heldOffsets.forEach(o -> assertEquals(List.of(2, 3), countsOf(deliveries, o), "delivery counts of offset " + o));
            assertEquals(produced.keySet(), offsets(deliveries).keySet());
        }
        assertOnlySentinelDelivered(group, topic, null);
    }

    @Test
    void share_groups_tool_describes_the_group_resets_it_to_earliest_and_deletes_it() throws Exception {
        String topic = "share-java-tool";
        String group = topic;
        createTopic(topic, 2);
        setGroupConfigs(group, Map.of("share.auto.offset.reset", "earliest"));
        Set<String> produced = new HashSet<>();
        for (int p = 0; p < 2; p++) {
            produced.addAll(produce(topic, p, values(5 * p, 5)).values());
        }
        try (KafkaShareConsumer<String, String> member = shareConsumer(group, topic, "share-java-tool-member")) {
            List<Delivery> deliveries = new ArrayList<>();
            consume(member, r -> AcknowledgeType.ACCEPT, () -> deliveries.size() >= 10, "all ten records", deliveries);

            KafkaTool.Result list = tool("--list");
            assertTrue(list.stdoutLines().contains(group), list.describe());
            KafkaTool.Result listed = tool("--list", "--state");
            assertTrue(listed.stdoutLines().stream().anyMatch(l -> l.matches(group + "\\s+Stable\\s*")), listed.describe());
            KafkaTool.Result state = tool("--describe", "--group", group, "--state");
            assertTrue(Pattern.compile("(?m)^" + group + "\\s+\\S+\\s+\\(\\d+\\)\\s+Stable\\s+1\\s*$").matcher(state.stdout()).find(),
                    state.describe());
            KafkaTool.Result members = tool("--describe", "--group", group, "--members");
            List<Map<String, String>> memberRows = table(members);
            assertEquals(1, memberRows.size(), members.describe());
            assertEquals("share-java-tool-member", memberRows.get(0).get("CLIENT-ID"), members.describe());
            assertEquals("2", memberRows.get(0).get("#PARTITIONS"), members.describe());
            assertEquals(topic + ":0,1", memberRows.get(0).get("ASSIGNMENT"), members.describe());
            KafkaTool.Result offsets = tool("--describe", "--group", group);
            List<Map<String, String>> rows = table(offsets);
            assertEquals(List.of("0", "1"), rows.stream().map(r -> r.get("PARTITION")).toList(), offsets.describe());
            assertEquals(List.of("0", "0"), rows.stream().map(r -> r.get("LAG")).toList(), offsets.describe());

            // A group with a member can be neither reset nor deleted.
            KafkaTool.Result reset = KafkaTool.run(SHARE_GROUP_COMMAND,
                    args("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"));
            assertEquals(1, reset.exitCode(), reset.describe());
            assertTrue(output(reset).contains("Share group '" + group + "' is not empty."), reset.describe());
            KafkaTool.Result delete = KafkaTool.run(SHARE_GROUP_COMMAND, args("--delete", "--group", group));
            assertTrue(output(delete).contains("Group '" + group + "' could not be deleted due to: "
                    + "org.apache.kafka.common.errors.GroupNotEmptyException"), delete.describe());
        }

        KafkaTool.Result empty = tool("--describe", "--group", group, "--state");
        assertTrue(Pattern.compile("(?m)^" + group + "\\s+\\S+\\s+\\(\\d+\\)\\s+Empty\\s+0\\s*$").matcher(empty.stdout()).find(),
                empty.describe());
        KafkaTool.Result reset = tool("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute");
        List<Map<String, String>> resetRows = table(reset);
        assertEquals(List.of("0", "1"), resetRows.stream().map(r -> r.get("PARTITION")).toList(), reset.describe());
        assertEquals(List.of("0", "0"), resetRows.stream().map(r -> r.get("NEW-OFFSET")).toList(), reset.describe());
        KafkaTool.Result described = tool("--describe", "--group", group);
        List<Map<String, String>> rows = table(described);
        assertEquals(List.of("0", "0"), rows.stream().map(r -> r.get("START-OFFSET")).toList(), described.describe());
        assertEquals(List.of("5", "5"), rows.stream().map(r -> r.get("LAG")).toList(), described.describe());

        // The group starts over: a new member gets every record again, once.
        try (KafkaShareConsumer<String, String> member = shareConsumer(group, topic, "share-java-tool-again")) {
            List<Delivery> again = new ArrayList<>();
            consume(member, r -> AcknowledgeType.ACCEPT, () -> again.size() >= 10, "all ten records again", again);
            assertEquals(produced.size(), again.size(), "records delivered after the reset: " + again);
            assertEquals(produced, again.stream().map(Delivery::value).collect(Collectors.toSet()));
        }

        KafkaTool.Result deleted = tool("--delete", "--group", group);
        assertTrue(deleted.stdout().contains("Deletion of requested share groups ('" + group + "') was successful."),
                deleted.describe());
        KafkaTool.Result after = tool("--list");
        assertFalse(after.stdoutLines().contains(group), after.describe());
        KafkaTool.Result gone = KafkaTool.run(SHARE_GROUP_COMMAND, args("--describe", "--group", group));
        assertTrue(output(gone).contains("org.apache.kafka.common.errors.GroupIdNotFoundException"), gone.describe());
    }

    // ----- helpers ---------------------------------------------------------------------------

    private static String bootstrap() {
        return KAFKA_BOOTSTRAP.isEmpty() ? BROKER.bootstrapServers() : KAFKA_BOOTSTRAP;
    }

    private static Properties clientProps() {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        return props;
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    /**
     * IncrementalAlterConfigs SET on the GROUP resource, then DescribeConfigs until the
     * broker reports every value (Kafka applies a group config after answering the change,
     * and a share partition initialised meanwhile would start with the old value).
     */
    private static void setGroupConfigs(String group, Map<String, String> configs) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
        List<AlterConfigOp> ops = configs.entrySet().stream()
                .map(e -> new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET)).toList();
        try (Admin admin = Admin.create(clientProps())) {
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
            while (true) {
                Config described = admin.describeConfigs(List.of(resource)).all()
                        .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(resource);
                Map<String, String> got = new HashMap<>();
                described.entries().forEach(e -> got.put(e.name(), e.value()));
                if (configs.entrySet().stream().allMatch(e -> e.getValue().equals(got.get(e.getKey())))) {
                    return;
                }
                checkDeadline(deadline, () -> "group " + group + " configs " + configs + " not applied: " + got);
                Thread.sleep(100);
            }
        }
    }

    /** {@code "v" + i} for i from {@code first}, {@code count} of them. */
    private static List<String> values(int first, int count) {
        return IntStream.range(first, first + count).mapToObj(i -> "v" + i).toList();
    }

    /**
     * One record per value (its key the value too) to {@code partition}, in small batches so
     * that a share fetch can take some without taking them all; returns offset to value.
     */
    private static Map<Long, String> produce(String topic, int partition, List<String> values) throws Exception {
        Properties props = clientProps();
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "1024");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        Map<Long, String> produced = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (String value : values) {
                sent.add(producer.send(new ProducerRecord<>(topic, partition, value, value)));
            }
            for (int i = 0; i < values.size(); i++) {
                RecordMetadata m = sent.get(i).get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                produced.put(m.offset(), values.get(i));
            }
        }
        return produced;
    }

    private static KafkaShareConsumer<String, String> shareConsumer(String group, String topic, String clientId) {
        Properties props = clientProps();
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    private static int deliveryCount(ConsumerRecord<String, String> r) {
        return r.deliveryCount().map(Short::intValue)
                .orElseThrow(() -> new AssertionError("no delivery count on offset " + r.offset()));
    }

    /**
     * One poll: each record acknowledged as {@code decide} says and recorded, then
     * {@code commitSync}, whose result must be a success for every partition.
     */
    private static void pollOnce(KafkaShareConsumer<String, String> c, int who,
            Function<ConsumerRecord<String, String>, AcknowledgeType> decide, List<Delivery> deliveries) {
        int polled = 0;
        for (ConsumerRecord<String, String> r : c.poll(POLL)) {
            int count = deliveryCount(r);
            assertTrue(count >= 1, "delivery count " + count + " of offset " + r.offset());
            deliveries.add(new Delivery(who, r.offset(), count, r.value()));
            c.acknowledge(r, decide.apply(r));
            polled++;
        }
        if (polled > 0) {
            Map<TopicIdPartition, Optional<KafkaException>> results = c.commitSync(CLIENT_TIMEOUT);
            results.forEach((tp, e) -> assertTrue(e.isEmpty(), () -> "acknowledgements refused for " + tp + ": " + e.get()));
        }
    }

    /** Polls {@code c} until {@code until}; fails after DELIVERY_WAIT. */
    private static void consume(KafkaShareConsumer<String, String> c,
            Function<ConsumerRecord<String, String>, AcknowledgeType> decide, BooleanSupplier until, String what,
            List<Delivery> deliveries) {
        long deadline = System.nanoTime() + DELIVERY_WAIT.toNanos();
        while (!until.getAsBoolean()) {
            checkDeadline(deadline, () -> "not within " + DELIVERY_WAIT + ": " + what + "; deliveries: " + deliveries);
            pollOnce(c, 0, decide, deliveries);
        }
    }

    /**
     * Produces a sentinel record and polls {@code consumer} (else a new member of
     * {@code group}) until it arrives and SETTLE more, accepting everything: the sentinel
     * must be all it receives.
     */
    private static void assertOnlySentinelDelivered(String group, String topic, KafkaShareConsumer<String, String> consumer)
            throws Exception {
        long sentinel = produce(topic, 0, List.of("sentinel")).keySet().iterator().next();
        KafkaShareConsumer<String, String> c = consumer != null ? consumer : shareConsumer(group, topic, group + "-sentinel");
        try {
            List<Delivery> extra = new ArrayList<>();
            consume(c, r -> AcknowledgeType.ACCEPT, () -> extra.stream().anyMatch(d -> d.offset() == sentinel), "the sentinel",
                    extra);
            long end = System.nanoTime() + SETTLE.toNanos();
            while (System.nanoTime() < end) {
                pollOnce(c, 0, r -> AcknowledgeType.ACCEPT, extra);
            }
            assertEquals(List.of(new Delivery(0, sentinel, 1, "sentinel")), extra, "records delivered again before the sentinel");
        } finally {
            if (consumer == null) {
                c.close();
            }
        }
    }

    private static Map<Long, Integer> offsets(List<Delivery> deliveries) {
        Map<Long, Integer> times = new HashMap<>();
        deliveries.forEach(d -> times.merge(d.offset(), 1, Integer::sum));
        return times;
    }

    private static List<Integer> countsOf(List<Delivery> deliveries, long offset) {
        return deliveries.stream().filter(d -> d.offset() == offset).map(Delivery::deliveryCount).toList();
    }

    private static void checkDeadline(long deadlineNanos, Supplier<String> what) {
        if (System.nanoTime() > deadlineNanos) {
            fail(what.get());
        }
    }

    /**
     * The tool's table: the line of upper-case column names, then one map per row, sorted by
     * topic and partition (the tool prints them in no fixed order).
     */
    private static List<Map<String, String>> table(KafkaTool.Result result) {
        List<Map<String, String>> rows = new ArrayList<>(
                result.rows(l -> l.matches("^GROUP\\s+.*[A-Z-]+\\s*$") && l.equals(l.toUpperCase())));
        rows.sort(Comparator.comparing((Map<String, String> r) -> r.getOrDefault("TOPIC", ""))
                .thenComparing(r -> Integer.parseInt(r.getOrDefault("PARTITION", "0"))));
        return rows;
    }

    private static List<String> args(String... rest) {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", bootstrap()));
        all.addAll(List.of(rest));
        return all;
    }

    /** What a tool printed, stdout then stderr (it reports some failures on one, some on the other). */
    private static String output(KafkaTool.Result result) {
        return result.stdout() + result.stderr();
    }

    /** Runs ShareGroupCommand with {@code rest} and requires exit 0. */
    private static KafkaTool.Result tool(String... rest) throws Exception {
        return KafkaTool.run(SHARE_GROUP_COMMAND, args(rest)).assertSuccess();
    }
}
