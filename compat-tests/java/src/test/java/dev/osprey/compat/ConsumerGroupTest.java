package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * KafkaConsumer in a group, the way the reliability guidance asks: auto commit off,
 * {@code commitSync} after processing, and a rebalance listener that commits in
 * {@code onPartitionsRevoked}, so that partitions change hands without a record lost or
 * processed twice. Once with the eager RangeAssignor, once with the CooperativeStickyAssignor.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ConsumerGroupTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final int PARTITIONS = 4;
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);

    @ParameterizedTest(name = "{0}")
    @ValueSource(classes = {RangeAssignor.class, CooperativeStickyAssignor.class})
    void members_committing_after_processing_and_on_revoke_hand_over_without_loss_or_duplicates(Class<?> assignor)
            throws Exception {
        String topic = "cg-handover-" + assignor.getSimpleName();
        String group = "cg-handover-" + assignor.getSimpleName();
        createTopic(topic, PARTITIONS);
        Set<TopicPartitionOffset> produced = new HashSet<>(produce(topic, 0, 400));

        Member first = new Member("first", group, topic, assignor);
        Member second = new Member("second", group, topic, assignor);
        try {
            first.start();
            waitUntil(() -> first.processed.size() == 400, "first processed the first 400");
            second.start();
            waitUntil(() -> first.assigned().size() == 2 && second.assigned().size() == 2, "two partitions each");
            produced.addAll(produce(topic, 400, 400));
            waitUntil(() -> processedBoth(first, second).containsAll(produced), "both processed the next 400");
            assertFalse(second.processed.isEmpty(), "second never processed anything");

            first.stop(); // closes: revokes (and commits) before leaving
            waitUntil(() -> second.assigned().size() == PARTITIONS, "second owns every partition");
            produced.addAll(produce(topic, 800, 200));
            waitUntil(() -> processedBoth(first, second).containsAll(produced), "second processed the last 200");
            Thread.sleep(500); // anything processed twice shows up now
        } finally {
            first.stop();
            second.stop();
        }

        assertEquals(List.of(), first.failures, "first");
        assertEquals(List.of(), second.failures, "second");
        assertTrue(first.revokeCommits > 0, "first committed in onPartitionsRevoked");
        List<TopicPartitionOffset> all = new ArrayList<>(first.processed);
        all.addAll(second.processed);
        Map<TopicPartitionOffset, Long> counts = all.stream().collect(Collectors.groupingBy(x -> x, Collectors.counting()));
        List<TopicPartitionOffset> twice = counts.entrySet().stream().filter(e -> e.getValue() > 1).map(Map.Entry::getKey)
                .sorted().toList();
        assertEquals(List.of(), twice, "processed twice");
        assertEquals(produced, counts.keySet(), "processed exactly what was produced");

        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            Map<TopicPartition, Long> committedOffsets = new HashMap<>();
            committed.forEach((tp, om) -> committedOffsets.put(tp, om.offset()));
            Map<TopicPartition, Long> expected = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) {
                expected.put(new TopicPartition(topic, p), 250L);
            }
            assertEquals(expected, committedOffsets, "committed offsets after both closed");
        }
    }

    @Test
    void admin_describes_the_group_and_deletes_offsets_only_of_topics_it_is_not_subscribed_to() throws Exception {
        String topic = "cg-admin";
        String other = "cg-admin-other";
        String group = "cg-admin";
        createTopic(topic, 2);
        createTopic(other, 1);
        produce(topic, 0, 20);
        try (Admin admin = Admin.create(BROKER.clientProps());
                KafkaConsumer<String, String> consumer = consumer(group, RangeAssignor.class, "cg-admin-member")) {
            consumer.subscribe(List.of(topic));
            int read = 0;
            long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
            while (read < 20 && System.nanoTime() < deadline) {
                read += consumer.poll(Duration.ofMillis(200)).count();
            }
            assertEquals(20, read, "records read by the member");
            TopicPartition otherTp = new TopicPartition(other, 0);
            consumer.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(3),
                    new TopicPartition(topic, 1), new OffsetAndMetadata(4), otherTp, new OffsetAndMetadata(0)));

            ConsumerGroupDescription description = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(GroupState.STABLE, description.groupState());
            assertEquals("range", description.partitionAssignor());
            assertEquals(BROKER.nodeId(), description.coordinator().id());
            assertEquals(1, description.members().size());
            assertEquals("cg-admin-member", description.members().iterator().next().clientId());
            assertEquals(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)),
                    description.members().iterator().next().assignment().topicPartitions());

            ExecutionException unknown = assertThrows(ExecutionException.class, () -> admin
                    .describeConsumerGroups(List.of("cg-admin-unknown")).describedGroups().get("cg-admin-unknown")
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            assertInstanceOf(GroupIdNotFoundException.class, unknown.getCause());

            // The group consumes `topic`: its offsets may not be deleted while it has members.
            ExecutionException refused = assertThrows(ExecutionException.class, () -> admin
                    .deleteConsumerGroupOffsets(group, Set.of(new TopicPartition(topic, 0)))
                    .partitionResult(new TopicPartition(topic, 0)).get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            assertInstanceOf(GroupSubscribedToTopicException.class, refused.getCause());
            // `other` is not subscribed to: its offset goes.
            assertNull(admin.deleteConsumerGroupOffsets(group, Set.of(otherTp)).partitionResult(otherTp)
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            Map<TopicPartition, OffsetAndMetadata> left = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            Map<TopicPartition, Long> leftOffsets = new HashMap<>();
            left.forEach((tp, om) -> leftOffsets.put(tp, om.offset()));
            assertEquals(Map.of(new TopicPartition(topic, 0), 3L, new TopicPartition(topic, 1), 4L), leftOffsets);
        }
    }

    /** Where one record is: what the tests count. */
    record TopicPartitionOffset(int partition, long offset) implements Comparable<TopicPartitionOffset> {
        @Override
        public int compareTo(TopicPartitionOffset o) {
            return partition != o.partition ? Integer.compare(partition, o.partition) : Long.compare(offset, o.offset);
        }
    }

    /**
     * One group member polling in its own thread (a KafkaConsumer belongs to one thread):
     * processes each record, then commits with {@code commitSync}; commits the positions of
     * revoked partitions in {@code onPartitionsRevoked}.
     */
    private static final class Member implements ConsumerRebalanceListener {
        final String name;
        final String topic;
        final KafkaConsumer<String, String> consumer;
        final List<TopicPartitionOffset> processed = new CopyOnWriteArrayList<>();
        final List<String> failures = new CopyOnWriteArrayList<>();
        final Map<TopicPartition, Long> positions = new HashMap<>();
        final Set<TopicPartition> owned = ConcurrentHashMap.newKeySet();
        final AtomicBoolean stopping = new AtomicBoolean();
        volatile int revokeCommits;
        Thread thread;

        Member(String name, String group, String topic, Class<?> assignor) {
            this.name = name;
            this.topic = topic;
            this.consumer = consumer(group, assignor, name);
        }

        void start() {
            thread = new Thread(this::run, name);
            thread.setDaemon(true);
            thread.start();
        }

        Set<TopicPartition> assigned() {
            return Set.copyOf(owned);
        }

        void stop() throws InterruptedException {
            if (thread == null || stopping.getAndSet(true)) {
                return;
            }
            thread.join(CLIENT_TIMEOUT.toMillis());
            if (thread.isAlive()) {
                failures.add("did not close within " + CLIENT_TIMEOUT);
            }
        }

        private void run() {
            try (consumer) {
                consumer.subscribe(List.of(topic), this);
                while (!stopping.get()) {
                    boolean any = false;
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        processed.add(new TopicPartitionOffset(r.partition(), r.offset()));
                        positions.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                        any = true;
                    }
                    if (any) {
                        commit(positions.keySet(), false);
                    }
                }
            } catch (RuntimeException e) {
                failures.add(e.toString());
            }
        }

        private void commit(Collection<TopicPartition> partitions, boolean revoking) {
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : partitions) {
                Long next = positions.get(tp);
                if (next != null) {
                    offsets.put(tp, new OffsetAndMetadata(next));
                }
            }
            if (offsets.isEmpty()) {
                return;
            }
            try {
                consumer.commitSync(offsets, CLIENT_TIMEOUT);
            } catch (RebalanceInProgressException e) {
                // The cooperative protocol keeps consuming while the group waits for
                // SyncGroup, and Kafka refuses commits then; the next commit (at the latest
                // the one in onPartitionsRevoked) covers these offsets.
                if (revoking) {
                    failures.add("commit in onPartitionsRevoked: " + e);
                }
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                if (!owned.add(tp)) {
                    failures.add("assigned " + tp + " it already owned");
                }
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) {
                commit(partitions, true);
                revokeCommits++;
            }
            for (TopicPartition tp : partitions) {
                positions.remove(tp);
                owned.remove(tp);
            }
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            failures.add("lost " + partitions);
            owned.removeAll(partitions);
        }
    }

    private static Set<TopicPartitionOffset> processedBoth(Member a, Member b) {
        Set<TopicPartitionOffset> all = new HashSet<>(a.processed);
        all.addAll(b.processed);
        return all;
    }

    private static void waitUntil(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within " + CLIENT_TIMEOUT + ": " + what);
            }
            Thread.sleep(20);
        }
    }

    /** Records {@code first..first+count} round-robin over the partitions, by explicit partition. */
    private static List<TopicPartitionOffset> produce(String topic, int first, int count) throws Exception {
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        int partitions;
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            partitions = admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(topic).partitions().size();
        }
        List<TopicPartitionOffset> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<RecordMetadata>> futures = IntStream.range(first, first + count)
                    .mapToObj(i -> producer.send(new ProducerRecord<>(topic, i % partitions, null, String.valueOf(i))))
                    .toList();
            producer.flush();
            for (var f : futures) {
                RecordMetadata m = f.get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                sent.add(new TopicPartitionOffset(m.partition(), m.offset()));
            }
        }
        return sent;
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    private static KafkaConsumer<String, String> consumer(String group, Class<?> assignor, String clientId) {
        return consumer(BROKER, group, assignor, clientId);
    }

    /** A group member that commits by hand: auto commit off, from the earliest offset. */
    static KafkaConsumer<String, String> consumer(OspreyBroker broker, String group, Class<?> assignor, String clientId) {
        Properties props = broker.clientProps();
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor.getName());
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }
}
