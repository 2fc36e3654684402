package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
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
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** KafkaProducer with its defaults (idempotent, acks=all) and an assign-mode KafkaConsumer. */
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class ProducerConsumerTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final int PARTITIONS = 3;
    private static final int RECORDS = 600;
    private static final int KEYS = 12;
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);

    @ParameterizedTest(name = "compression {0}")
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void idempotent_producer_records_read_back_exactly_in_per_key_order(String codec) throws Exception {
        String topic = "pc-" + codec;
        createTopic(topic, PARTITIONS);

        List<RecordMetadata> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer(Map.of(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.LINGER_MS_CONFIG, "5"))) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<String, String> record = new ProducerRecord<>(topic, key(i), value(codec, i));
                record.headers().add("seq", ByteBuffer.allocate(4).putInt(i).array());
                record.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                futures.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                sent.add(f.get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            }
        }

        Map<Integer, Long> perPartition = new HashMap<>();
        for (RecordMetadata m : sent) {
            assertEquals(topic, m.topic());
            perPartition.merge(m.partition(), 1L, Long::sum);
        }
        List<ConsumerRecord<String, String>> read = readAll(topic, RECORDS);
        assertEquals(RECORDS, read.size(), "records read back from " + topic);

        Map<String, Integer> lastSeqPerKey = new HashMap<>();
        Map<Integer, Long> nextOffset = new HashMap<>();
        for (ConsumerRecord<String, String> r : read) {
            int seq = ByteBuffer.wrap(header(r, "seq")).getInt();
            assertEquals(key(seq), r.key(), "key of seq " + seq);
            assertEquals(value(codec, seq), r.value(), "value of seq " + seq);
            assertArrayEquals(codec.getBytes(StandardCharsets.UTF_8), header(r, "codec"));
            assertEquals(2, r.headers().toArray().length, "headers of seq " + seq);
            // The producer's acknowledgement and the consumer agree on where each record is.
            assertEquals(sent.get(seq).partition(), r.partition(), "partition of seq " + seq);
            assertEquals(sent.get(seq).offset(), r.offset(), "offset of seq " + seq);
            // Offsets are dense from 0: idempotence means no duplicate and no gap.
            long expected = nextOffset.getOrDefault(r.partition(), 0L);
            assertEquals(expected, r.offset(), "offset in partition " + r.partition());
            nextOffset.put(r.partition(), expected + 1);
            Integer previous = lastSeqPerKey.put(r.key(), seq);
            assertTrue(previous == null || previous < seq, "key " + r.key() + ": seq " + seq + " after " + previous);
        }
        assertEquals(KEYS, lastSeqPerKey.size(), "distinct keys");

        try (KafkaConsumer<String, String> consumer = consumer()) {
            List<TopicPartition> tps = partitions(topic);
            Map<TopicPartition, Long> beginning = consumer.beginningOffsets(tps, CLIENT_TIMEOUT);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, CLIENT_TIMEOUT);
            for (TopicPartition tp : tps) {
                assertEquals(0L, beginning.get(tp), "beginning offset of " + tp);
                assertEquals(perPartition.getOrDefault(tp.partition(), 0L), end.get(tp), "end offset of " + tp);
            }
        }
    }

    @Test
    void consumer_closing_its_fetch_session_leaves_the_broker_serving() throws Exception {
        // On close, a consumer with an open fetch session sends a Fetch with the final
        // session epoch and no partitions (KIP-227). OspreyBroker's after-each check then
        // requires that the broker still answers.
        String topic = "pc-close-session";
        createTopic(topic, 1);
        try (KafkaProducer<String, String> producer = producer(Map.of())) {
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, "k", "v" + i)).get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        int read = 0;
        long closeStarted;
        KafkaConsumer<String, String> consumer = consumer();
        try {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
            while (read < 5 && System.nanoTime() < deadline) {
                read += consumer.poll(Duration.ofMillis(200)).count();
            }
            // A second fetch round makes sure the session is established before closing.
            consumer.poll(Duration.ofMillis(700));
        } finally {
            closeStarted = System.nanoTime();
            consumer.close(Duration.ofSeconds(10));
        }
        assertEquals(5, read);
        long closeMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - closeStarted);
        assertTrue(closeMs < 5_000, "consumer.close() took " + closeMs + " ms");
    }

    @Test
    void offsets_for_times_finds_the_first_record_at_or_after_a_timestamp() throws Exception {
        String topic = "pc-timestamps";
        createTopic(topic, 1);
        long base = System.currentTimeMillis() - 3_600_000L;
        try (KafkaProducer<String, String> producer = producer(Map.of())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + i * 1_000L, "k", "v" + i))
                        .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = consumer()) {
            Map<TopicPartition, OffsetAndTimestamp> between =
                    consumer.offsetsForTimes(Map.of(tp, base + 2_500L), CLIENT_TIMEOUT);
            assertNotNull(between.get(tp), "offsetsForTimes(base + 2.5 s)");
            assertEquals(3L, between.get(tp).offset());
            assertEquals(base + 3_000L, between.get(tp).timestamp());

            Map<TopicPartition, OffsetAndTimestamp> exact =
                    consumer.offsetsForTimes(Map.of(tp, base), CLIENT_TIMEOUT);
            assertEquals(0L, exact.get(tp).offset());
            assertEquals(base, exact.get(tp).timestamp());

            Map<TopicPartition, OffsetAndTimestamp> after =
                    consumer.offsetsForTimes(Map.of(tp, base + 60_000L), CLIENT_TIMEOUT);
            assertNull(after.get(tp), "no record at or after the last timestamp");

            assertEquals(10L, consumer.endOffsets(List.of(tp), CLIENT_TIMEOUT).get(tp));
        }
    }

    @Test
    void partitions_for_names_this_broker_as_the_only_replica() throws Exception {
        String topic = "pc-partitions-for";
        createTopic(topic, 4);
        try (KafkaProducer<String, String> producer = producer(Map.of())) {
            assertPartitionInfos(topic, producer.partitionsFor(topic));
        }
        try (KafkaConsumer<String, String> consumer = consumer()) {
            assertPartitionInfos(topic, consumer.partitionsFor(topic, CLIENT_TIMEOUT));
            assertTrue(consumer.listTopics(CLIENT_TIMEOUT).containsKey(topic), "listTopics names " + topic);
        }
    }

    private static void assertPartitionInfos(String topic, List<PartitionInfo> infos) {
        assertEquals(4, infos.size(), "partitions of " + topic);
        assertEquals(List.of(0, 1, 2, 3), infos.stream().map(PartitionInfo::partition).sorted().toList());
        for (PartitionInfo p : infos) {
            assertEquals(topic, p.topic());
            assertEquals(BROKER.nodeId(), p.leader().id(), "leader of " + p);
            assertEquals(BROKER.port(), p.leader().port(), "leader port of " + p);
            assertEquals(1, p.replicas().length, "replicas of " + p);
            assertEquals(1, p.inSyncReplicas().length, "ISR of " + p);
        }
    }

    private static String key(int seq) {
        return "key-" + (seq % KEYS);
    }

    private static String value(String codec, int seq) {
        // Repetitive enough to compress, distinct enough to check.
        return codec + "-value-" + seq + "-" + "x".repeat(seq % 97);
    }

    private static byte[] header(ConsumerRecord<?, ?> r, String name) {
        Header h = r.headers().lastHeader(name);
        assertNotNull(h, "header " + name + " at " + r.topic() + "-" + r.partition() + "@" + r.offset());
        return h.value();
    }

    static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                    .all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    private static List<TopicPartition> partitions(String topic) {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            int n = admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(topic).partitions().size();
            return IntStream.range(0, n).mapToObj(i -> new TopicPartition(topic, i)).toList();
        } catch (Exception e) {
            throw new AssertionError("describeTopics " + topic, e);
        }
    }

    /** Assign mode (no group.id), from the beginning, until {@code expected} records or timeout. */
    private static List<ConsumerRecord<String, String>> readAll(String topic, int expected) {
        List<ConsumerRecord<String, String>> read = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = consumer()) {
            List<TopicPartition> tps = partitions(topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
            while (read.size() < expected && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(read::add);
            }
            // One more poll: anything beyond `expected` is a duplicate the test must see.
            consumer.poll(Duration.ofMillis(300)).forEach(read::add);
        }
        read.sort((a, b) -> a.partition() != b.partition()
                ? Integer.compare(a.partition(), b.partition())
                : Long.compare(a.offset(), b.offset()));
        return read;
    }

    private static KafkaProducer<String, String> producer(Map<String, String> overrides) {
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "compat-producer");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.putAll(overrides);
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    private static KafkaConsumer<String, String> consumer() {
        Properties props = BROKER.clientProps();
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-consumer");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }
}
