package dev.osprey.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the Java client against the capture listener so that it sends the requests the
 * golden tests keep: ApiVersions, Metadata, Produce with every compression codec,
 * InitProducerId, ListOffsets, Fetch, FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
 * OffsetFetch, OffsetCommit, LeaveGroup.
 *
 * <p>Usage: {@code GoldenCapture HOST:PORT}. Each client gets its own client.id, which the
 * listener uses as the capture directory. Every step is bounded in time; the exit code is
 * non-zero if any step failed.
 */
public final class GoldenCapture {
    private static final String TOPIC = "golden-java";
    private static final String GROUP = "golden-java-group";
    private static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(15);

    private GoldenCapture() {}

    interface Step {
        void run() throws Exception;
    }

    public static void main(String[] args) {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        if (args.length != 1) {
            System.err.println("usage: GoldenCapture HOST:PORT");
            System.exit(2);
        }
        String bootstrap = args[0];
        System.out.println("kafka-clients " + clientVersion());
        Map<String, Step> steps = new java.util.LinkedHashMap<>();
        for (String codec : CODECS) {
            String name = codec.equals("none") ? "uncompressed" : codec;
            steps.put("producer-" + name, () -> produce(bootstrap, "java-producer-" + name, Map.of(
                    ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false",
                    ProducerConfig.ACKS_CONFIG, "1")));
        }
        steps.put("producer-idempotent", () -> produce(bootstrap, "java-producer-idempotent", Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                ProducerConfig.ACKS_CONFIG, "all")));
        steps.put("consumer-assign", () -> consumeAssigned(bootstrap));
        steps.put("consumer-group", () -> consumeGroup(bootstrap));

        int failed = 0;
        for (Map.Entry<String, Step> step : steps.entrySet()) {
            long started = System.nanoTime();
            try {
                step.getValue().run();
                System.out.printf("ok   %s (%.1fs)%n", step.getKey(), (System.nanoTime() - started) / 1e9);
            } catch (Exception e) {
                failed++;
                System.out.printf("FAIL %s: %s%n", step.getKey(), e);
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    /** The version kafka-clients itself reports, read from the resource it ships. */
    private static String clientVersion() {
        Properties p = new Properties();
        try (var in = KafkaProducer.class.getClassLoader().getResourceAsStream("kafka/kafka-version.properties")) {
            if (in != null) {
                p.load(in);
            }
        } catch (java.io.IOException e) {
            return "unknown";
        }
        return p.getProperty("version", "unknown");
    }

    private static Properties common(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "10000");
        return p;
    }

    /** Sends a few keyed records with headers in one batch and waits for their acks. */
    private static void produce(String bootstrap, String clientId, Map<String, String> extra) throws Exception {
        Properties p = common(bootstrap, clientId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "50");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        p.putAll(extra);
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                // Repetitive values so that every codec actually compresses something.
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(TOPIC,
                        ("key-" + i).getBytes(StandardCharsets.UTF_8),
                        ("value " + i + " ").repeat(20).getBytes(StandardCharsets.UTF_8));
                record.headers().add("trace", ("t" + i).getBytes(StandardCharsets.UTF_8));
                record.headers().add("empty", new byte[0]);
                acks.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> ack : acks) {
                ack.get(STEP_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
    }

    private static Properties consumerProps(String bootstrap, String clientId) {
        Properties p = common(bootstrap, clientId);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return p;
    }

    /** Assign + poll without a group: ListOffsets (earliest, latest), then Fetch. */
    private static void consumeAssigned(String bootstrap) {
        Properties p = consumerProps(bootstrap, "java-consumer-assign");
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            TopicPartition p0 = new TopicPartition(TOPIC, 0);
            TopicPartition p1 = new TopicPartition(TOPIC, 1);
            consumer.assign(List.of(p0, p1));
            consumer.seekToBeginning(List.of(p0));
            consumer.seekToEnd(List.of(p1));
            long deadline = System.nanoTime() + Duration.ofSeconds(4).toNanos();
            while (System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(500));
            }
        }
    }

    /**
     * Subscribe: FindCoordinator, JoinGroup (twice, KIP-394), SyncGroup, OffsetFetch,
     * Heartbeat, then an explicit OffsetCommit and LeaveGroup on close.
     */
    private static void consumeGroup(String bootstrap) {
        Properties p = consumerProps(bootstrap, "java-consumer-group");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        List<TopicPartition> assigned = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(TOPIC), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    assigned.addAll(partitions);
                }
            });
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            while (assigned.isEmpty() && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(500));
            }
            if (assigned.isEmpty()) {
                throw new IllegalStateException("no assignment");
            }
            long settle = System.nanoTime() + Duration.ofSeconds(2).toNanos();
            while (System.nanoTime() < settle) {
                consumer.poll(Duration.ofMillis(500));
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : assigned) {
                offsets.put(tp, new OffsetAndMetadata(0));
            }
            consumer.commitSync(offsets, STEP_TIMEOUT);
            consumer.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(Duration.ofSeconds(5)));
        }
    }
}
