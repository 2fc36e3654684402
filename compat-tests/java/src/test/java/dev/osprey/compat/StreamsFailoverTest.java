package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A Kafka Streams word count with {@code processing.guarantee=exactly_once_v2} on a
 * 3-node Osprey cluster, its internal topics (the repartition topic of the groupBy and the
 * store's changelog) at replication factor 3: input lines are produced in batches, and
 * between batches each node in turn is killed with SIGKILL, a batch is produced without
 * it, and it is started again. Every node is a group and a transaction coordinator for
 * some partitions of the internal topics, so each kill moves some of the application's
 * coordinators as well as partition leaders.
 *
 * <p>Exactness is the final counts, read read_committed: each word's last count is its
 * number of occurrences in the input, no more (a duplicate) and no less (a loss).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class StreamsFailoverTest {
    /** A dead node is fenced 3 s after its last heartbeat (Kafka: 9 s), so its partitions move within seconds. */
    @RegisterExtension
    static final OspreyCluster CLUSTER = new OspreyCluster(Map.of(
            "broker.session.timeout.ms", "3000",
            "broker.heartbeat.interval.ms", "500",
            "group.initial.rebalance.delay.ms", "0"));

    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    /** How long the application may take to count everything after the last restart. */
    private static final Duration COUNT_TIMEOUT = Duration.ofSeconds(120);
    private static final int PARTITIONS = 3;
    private static final int LINES_PER_BATCH = 1_500;
    private static final int VOCABULARY = 300;
    private static final int MAX_WORDS_PER_LINE = 6;

    @Test
    void word_count_with_exactly_once_v2_is_exact_through_kills_of_each_node() throws Exception {
        String input = "wc-failover-lines";
        String output = "wc-failover-counts";
        try (Admin admin = CLUSTER.admin()) {
            admin.createTopics(List.of(replicated(input), replicated(output))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            CLUSTER.awaitAllInSync(admin);
        }
        List<String> transitions = Collections.synchronizedList(new ArrayList<>());
        List<Throwable> uncaught = Collections.synchronizedList(new ArrayList<>());
        Path stateDir = Files.createTempDirectory("streams-failover-");
        Map<String, Long> expected = new TreeMap<>();
        Random random = new Random(17);
        List<String> rounds = new ArrayList<>();
        KafkaStreams streams = new KafkaStreams(WordCount.topology(input, output), streamsProps(stateDir));
        streams.setStateListener((now, previous) -> transitions.add(previous + "->" + now));
        // A stream thread that dies is replaced, as a production application would do; the
        // counts must stay exact either way.
        streams.setUncaughtExceptionHandler(e -> {
            uncaught.add(e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Properties producerProps = CLUSTER.clientProps();
        producerProps.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        producerProps.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(producerProps, new StringSerializer(), new StringSerializer());
                Admin admin = CLUSTER.admin()) {
            streams.start();
            WordCount.awaitRunning(streams, transitions, OspreyCluster.WAIT);
            produceLines(producer, input, random, expected);
            for (OspreyCluster.Node node : CLUSTER.nodes()) {
                long killedAt = System.nanoTime();
                node.kill9();
                produceLines(producer, input, random, expected);
                double producedAfter = (System.nanoTime() - killedAt) / 1e9;
                node.start();
                CLUSTER.awaitBrokers();
                CLUSTER.awaitAllInSync(admin);
                rounds.add(String.format("%s killed, a batch produced without it in %.1f s, back in sync %.1f s "
                        + "after the kill", node, producedAfter, (System.nanoTime() - killedAt) / 1e9));
                produceLines(producer, input, random, expected);
            }
            Map<String, Long> counted = latestCounts(output, expected, COUNT_TIMEOUT);
            assertEquals(expected, counted, "counts read_committed while Streams runs");
        } finally {
            streams.close(CLIENT_TIMEOUT);
            OspreyBroker.deleteRecursively(stateDir);
        }
        Map<String, Long> finalCounts = latestCounts(output, null, Duration.ZERO);
        System.out.println("Streams exactly_once_v2 word count through kills: " + String.join("; ", rounds)
                + "; stream threads replaced " + uncaught.size() + " times " + uncaught + "; state transitions "
                + transitions);
        assertEquals(expected, finalCounts, "final counts read_committed after close");
    }

    private static NewTopic replicated(String name) {
        return new NewTopic(name, PARTITIONS, (short) 3).configs(Map.of("min.insync.replicas", "2"));
    }

    private static Properties streamsProps(Path stateDir) {
        Properties props = WordCount.exactlyOnce(CLUSTER.clientProps(), "wc-failover", stateDir);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.topicPrefix("min.insync.replicas"), "2");
        return props;
    }

    /** One batch of pseudo-random lines; adds their words to {@code expected} once every send succeeded. */
    private static void produceLines(KafkaProducer<String, String> producer, String input, Random random,
            Map<String, Long> expected) throws Exception {
        Map<String, Long> batch = new TreeMap<>();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        for (int i = 0; i < LINES_PER_BATCH; i++) {
            String line = WordCount.line(random, MAX_WORDS_PER_LINE, VOCABULARY, batch);
            acks.add(producer.send(new ProducerRecord<>(input, "line-" + i, line)));
        }
        producer.flush();
        for (Future<RecordMetadata> ack : acks) {
            ack.get(); // throws if a send failed: its words' fate would be unknown
        }
        batch.forEach((word, n) -> expected.merge(word, n, Long::sum));
    }

    private static Map<String, Long> latestCounts(String output, Map<String, Long> expected, Duration timeout) {
        return WordCount.latestCounts(CLUSTER.clientProps(), output, PARTITIONS, expected, timeout, OspreyCluster.WAIT);
    }
}
