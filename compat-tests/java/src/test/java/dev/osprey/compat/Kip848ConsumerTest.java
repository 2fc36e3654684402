package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The KIP-848 consumer protocol ({@code group.protocol=consumer}) with the Java 4.x client:
 * the broker's assignor spreads partitions over two members, every record is processed
 * and committed once, and the group is described as a consumer group. A
 * {@link SubscriptionPattern} (resolved by the broker, KIP-848's SubscribedTopicRegex)
 * consumes the matching topics, one created after subscribing included.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class Kip848ConsumerTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final int PARTITIONS = 4;
    private static final int RECORDS = 400;

    @Test
    void two_consumer_protocol_members_split_partitions_and_process_everything_once() throws Exception {
        String topic = "kip848";
        String group = "kip848-group";
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        Properties pp = BROKER.clientProps();
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            }
            producer.flush();
        }

        Set<String> processed = ConcurrentHashMap.newKeySet();
        List<String> duplicates = new ArrayList<>();
        List<Set<TopicPartition>> assignments = List.of(ConcurrentHashMap.newKeySet(), ConcurrentHashMap.newKeySet());
        List<KafkaConsumer<String, String>> consumers = new ArrayList<>();
        try {
            for (int i = 0; i < 2; i++) {
                Properties cp = BROKER.clientProps();
                cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
                cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
                Set<TopicPartition> mine = assignments.get(i);
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        mine.removeAll(partitions);
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        mine.addAll(partitions);
                    }
                });
                consumers.add(c);
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            boolean balanced = false;
            while ((processed.size() < RECORDS || !balanced) && System.nanoTime() < deadline) {
                for (KafkaConsumer<String, String> c : consumers) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        if (!processed.add(r.value())) {
                            duplicates.add(r.value());
                        }
                        c.commitSync(Map.of(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1)));
                    }
                }
                balanced = assignments.get(0).size() == 2 && assignments.get(1).size() == 2;
            }
            assertEquals(RECORDS, processed.size(), "every record processed");
            assertEquals(List.of(), duplicates, "no record processed twice");
            assertTrue(balanced, "partitions not split 2/2: " + assignments);
            Set<TopicPartition> union = new HashSet<>(assignments.get(0));
            union.addAll(assignments.get(1));
            assertEquals(PARTITIONS, union.size(), "each partition owned by one member: " + assignments);

            try (Admin admin = Admin.create(BROKER.clientProps())) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
                assertEquals(GroupType.CONSUMER, d.type());
                assertEquals(2, d.members().size());
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                assertEquals(RECORDS, committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
            }
        } finally {
            for (KafkaConsumer<String, String> c : consumers) {
                c.close(Duration.ofSeconds(10));
            }
        }
    }

    @Test
    void a_broker_side_pattern_subscription_consumes_matching_topics_including_one_created_later() throws Exception {
        String group = "kip848-pattern";
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic("JPFX-early", 2, (short) 1), new NewTopic("jother", 1, (short) 1)))
                    .all()
                    .get(30, TimeUnit.SECONDS);
        }
        Properties pp = BROKER.clientProps();
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Properties cp = BROKER.clientProps();
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
                KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>("JPFX-early", "early-" + i));
                producer.send(new ProducerRecord<>("jother", "other-" + i));
            }
            producer.flush();
            consumer.subscribe(new SubscriptionPattern("JPFX-.*"));
            pollUntil(consumer, seen, 10);
            try (Admin admin = Admin.create(BROKER.clientProps())) {
                admin.createTopics(List.of(new NewTopic("JPFX-late", 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            }
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>("JPFX-late", "late-" + i));
            }
            producer.flush();
            pollUntil(consumer, seen, 15);
            Set<String> expected = new HashSet<>();
            for (int i = 0; i < 10; i++) {
                expected.add("JPFX-early:early-" + i);
            }
            for (int i = 0; i < 5; i++) {
                expected.add("JPFX-late:late-" + i);
            }
            assertEquals(expected, seen);
            Set<String> assignedTopics = new HashSet<>();
            consumer.assignment().forEach(tp -> assignedTopics.add(tp.topic()));
            assertEquals(Set.of("JPFX-early", "JPFX-late"), assignedTopics);
        }
    }

    /** Polls until {@code seen} holds {@code count} "topic:value" entries or 60 s passed. */
    private static void pollUntil(KafkaConsumer<String, String> consumer, Set<String> seen, int count) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (seen.size() < count && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                seen.add(r.topic() + ":" + r.value());
            }
        }
    }
}
