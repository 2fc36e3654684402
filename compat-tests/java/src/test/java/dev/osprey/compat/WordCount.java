package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/** The Kafka Streams word count the exactly-once tests run, and what they check it with. */
final class WordCount {
    private WordCount() {}

    /** lines -> words -> groupBy(word) (a repartition topic) -> count (a changelog) -> output. */
    static Topology topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word)
                .count(Materialized.as("word-counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    /** {@code client}'s settings with exactly_once_v2, two stream threads and String serdes. */
    static Properties exactlyOnce(Properties client, String applicationId, Path stateDir) {
        Properties props = new Properties();
        props.putAll(client);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        return props;
    }

    /** A pseudo-random line of 1 to {@code maxWords} words "w<n>"; each is counted in {@code counts}. */
    static String line(Random random, int maxWords, int vocabulary, Map<String, Long> counts) {
        int words = 1 + random.nextInt(maxWords);
        StringBuilder line = new StringBuilder();
        for (int w = 0; w < words; w++) {
            String word = "w" + random.nextInt(vocabulary);
            counts.merge(word, 1L, Long::sum);
            line.append(w == 0 ? "" : " ").append(word);
        }
        return line.toString();
    }

    static void awaitRunning(KafkaStreams streams, List<String> transitions, Duration wait) throws InterruptedException {
        long deadline = System.nanoTime() + wait.toNanos();
        while (streams.state() != KafkaStreams.State.RUNNING) {
            if (System.nanoTime() > deadline || !streams.state().isRunningOrRebalancing()) {
                fail("Streams is " + streams.state() + " after " + transitions + ", not RUNNING, within " + wait);
            }
            Thread.sleep(50);
        }
    }

    /**
     * The last count of each word in {@code output} (its partitions 0 to {@code partitions}
     * - 1), read read_committed from the beginning with the {@code client} settings: until
     * it equals {@code expected} (within {@code timeout}), or, with no expectation, up to
     * the high watermarks (within {@code wait}: a transaction left open never gets there).
     */
    static Map<String, Long> latestCounts(Properties client, String output, int partitions, Map<String, Long> expected,
            Duration timeout, Duration wait) {
        Duration clientTimeout = Duration.ofSeconds(30);
        List<TopicPartition> tps = IntStream.range(0, partitions).mapToObj(p -> new TopicPartition(output, p)).toList();
        Properties props = new Properties();
        props.putAll(client);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        Map<String, Long> latest = new TreeMap<>();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(props, new StringDeserializer(), new LongDeserializer())) {
            c.assign(tps);
            c.seekToBeginning(tps);
            if (expected == null) {
                Map<TopicPartition, Long> highWatermarks;
                try (KafkaConsumer<String, Long> u =
                        new KafkaConsumer<>(client, new StringDeserializer(), new LongDeserializer())) {
                    highWatermarks = u.endOffsets(tps, clientTimeout);
                }
                long deadline = System.nanoTime() + wait.toNanos();
                while (tps.stream().anyMatch(tp -> c.position(tp, clientTimeout) < highWatermarks.get(tp))) {
                    if (System.nanoTime() > deadline) {
                        fail("read_committed consumer of " + output + " not at the high watermarks " + highWatermarks
                                + " within " + wait + ": a transaction left open");
                    }
                    c.poll(Duration.ofMillis(200)).forEach(r -> latest.put(r.key(), r.value()));
                }
                return latest;
            }
            long deadline = System.nanoTime() + timeout.toNanos();
            while (!latest.equals(expected)) {
                if (System.nanoTime() > deadline) {
                    fail("within " + timeout + " the committed counts did not reach the expected ones; differing "
                            + "words (first 20): " + differences(expected, latest));
                }
                c.poll(Duration.ofMillis(200)).forEach(r -> latest.put(r.key(), r.value()));
            }
            return latest;
        }
    }

    /** The first 20 words whose count differs from the expected one. */
    static Map<String, String> differences(Map<String, Long> expected, Map<String, Long> actual) {
        Map<String, String> diff = new TreeMap<>();
        for (String word : expected.keySet()) {
            if (!expected.get(word).equals(actual.get(word)) && diff.size() < 20) {
                diff.put(word, "expected " + expected.get(word) + ", got " + actual.get(word));
            }
        }
        return diff;
    }
}
