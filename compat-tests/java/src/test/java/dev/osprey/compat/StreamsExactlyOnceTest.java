package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Kafka Streams with {@code processing.guarantee=exactly_once_v2} against Osprey, which
 * finalizes transaction version 2 (KIP-890 part 2: every commit bumps the producer epoch,
 * and a partition joins the transaction through its first Produce). A word count with a
 * repartition topic and a changelog-backed store, two stream threads, commits every 50 ms
 * and small producer batches (so several batches per partition are in flight right after
 * each commit), input produced while it runs, and threads burning CPU beside it.
 *
 * <p>Exactness is the final counts, read read_committed after Streams closed. Robustness
 * is that no producer was fenced: a fencing (the broker aborting a transaction on its
 * timeout) costs a Streams application a rebalance, although the counts stay exact. Issue
 * 13 item 3 was such a storm: after the epoch bump a later batch of the new epoch was
 * accepted ahead of a delayed sequence 0, which then could never land. That needs a race
 * (sequence 0 refused with CONCURRENT_TRANSACTIONS while the previous transaction's
 * markers are written, a later batch let in just after), so this test catches a broker
 * without the rule only in the runs where the race happens (about half of the runs on a
 * busy 2-core host); the summary it prints counts the races as Produce
 * OUT_OF_ORDER_SEQUENCE_NUMBER. The rule itself is unit-tested in the storage crate.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class StreamsExactlyOnceTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    /** How long the application may take to count everything; it normally needs far less. */
    private static final Duration COUNT_TIMEOUT = Duration.ofSeconds(120);
    private static final int LINES = 10_000;
    private static final int VOCABULARY = 500;
    private static final int MAX_WORDS_PER_LINE = 8;
    private static final int PARTITIONS = 4;
    private static final int CPU_BURNERS = 2;

    @Test
    void word_count_with_exactly_once_v2_under_load_is_exact_and_fences_no_producer() throws Exception {
        String input = "wc-lines";
        String output = "wc-counts";
        createTopics(input, output);
        Map<String, Long> before = brokerCounters();
        long started = System.nanoTime();

        List<String> transitions = Collections.synchronizedList(new ArrayList<>());
        List<Throwable> uncaught = Collections.synchronizedList(new ArrayList<>());
        Path stateDir = Files.createTempDirectory("streams-eos-");
        KafkaStreams streams = new KafkaStreams(WordCount.topology(input, output), streamsProps(stateDir));
        streams.setStateListener((now, previous) -> transitions.add(previous + "->" + now));
        streams.setUncaughtExceptionHandler(e -> {
            uncaught.add(e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        AtomicBoolean burning = new AtomicBoolean(true);
        List<Thread> burners = IntStream.range(0, CPU_BURNERS).mapToObj(i -> burner(burning, i)).toList();
        Map<String, Long> expected;
        int rebalancesAfterRunning;
        long runningAt;
        long producedAt;
        long countedAt;
        try {
            streams.start();
            WordCount.awaitRunning(streams, transitions, CLIENT_TIMEOUT);
            runningAt = System.nanoTime();
            int transitionsAtRunning = transitions.size();
            burners.forEach(Thread::start);
            expected = produceLines(input);
            producedAt = System.nanoTime();
            latestCounts(output, expected, before, COUNT_TIMEOUT);
            countedAt = System.nanoTime();
            rebalancesAfterRunning = (int) transitions.subList(transitionsAtRunning, transitions.size()).stream()
                    .filter(t -> t.equals("RUNNING->REBALANCING")).count();
        } finally {
            burning.set(false);
            streams.close(CLIENT_TIMEOUT);
            OspreyBroker.deleteRecursively(stateDir);
        }
        for (Thread burner : burners) {
            burner.join();
        }

        // Exact: after Streams committed and closed, the last committed count of each word
        // is its number of occurrences, no more (a duplicate) and no less (a loss).
        Map<String, Long> finalCounts = latestCounts(output, null, before, Duration.ZERO);
        assertEquals(expected, finalCounts, "final counts read_committed after close");
        assertTrue(uncaught.isEmpty(), "stream threads died: " + uncaught);

        Map<String, Long> after = brokerCounters();
        long fenced = after.get("fenced") - before.get("fenced");
        long aborted = after.get("aborted") - before.get("aborted");
        long outOfOrder = after.get("outOfOrder") - before.get("outOfOrder");
        String summary = String.format("Streams exactly_once_v2 word count: %d lines in %.1f s (RUNNING after %.1f s, "
                        + "input produced after %.1f s more, counted after %.1f s more); producers fenced %d, "
                        + "transactions aborted %d, Produce OUT_OF_ORDER_SEQUENCE_NUMBER %d, rebalances after RUNNING %d; "
                        + "state transitions %s",
                LINES, (System.nanoTime() - started) / 1e9, (runningAt - started) / 1e9, (producedAt - runningAt) / 1e9,
                (countedAt - producedAt) / 1e9, fenced, aborted, outOfOrder, rebalancesAfterRunning,
                transitions);
        System.out.println(summary);
        // A fenced producer is a transaction the broker aborted on its timeout (or a second
        // instance of a transactional id, which this application never starts).
        assertEquals(0, fenced, summary);
        assertEquals(0, aborted, summary);
        assertEquals(0, rebalancesAfterRunning, summary);
    }

    private static Properties streamsProps(Path stateDir) {
        Properties props = WordCount.exactlyOnce(BROKER.clientProps(), "wc-eos", stateDir);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // Many transactions, hence many epoch bumps, each followed by a burst of Produce.
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 50);
        // Small batches: several per partition in flight at once behind each sequence 0.
        props.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 1024);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        return props;
    }

    private static void createTopics(String... topics) throws Exception {
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(Stream.of(topics).map(t -> new NewTopic(t, PARTITIONS, (short) 1)).toList()).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    /** Produces the input lines (a fixed pseudo-random text) and returns each word's count. */
    private static Map<String, Long> produceLines(String input) {
        Random random = new Random(13);
        Map<String, Long> expected = new TreeMap<>();
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < LINES; i++) {
                String line = WordCount.line(random, MAX_WORDS_PER_LINE, VOCABULARY, expected);
                producer.send(new ProducerRecord<>(input, "line-" + i, line));
            }
            producer.flush();
        }
        return expected;
    }

    /**
     * The last count of each word in the output topic, read read_committed from the
     * beginning: until it equals {@code expected} (within {@code timeout}, failing as soon
     * as the broker fenced a producer since {@code before}), or, with no expectation, up to
     * the end offsets.
     */
    private static Map<String, Long> latestCounts(String output, Map<String, Long> expected, Map<String, Long> before,
            Duration timeout) {
        Properties props = BROKER.clientProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        Map<String, Long> latest = new TreeMap<>();
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(output, p)).toList();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(props, new StringDeserializer(), new LongDeserializer())) {
            c.assign(tps);
            c.seekToBeginning(tps);
            if (expected == null) {
                Map<TopicPartition, Long> ends = c.endOffsets(tps, CLIENT_TIMEOUT);
                long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
                while (tps.stream().anyMatch(tp -> c.position(tp, CLIENT_TIMEOUT) < ends.get(tp))) {
                    if (System.nanoTime() > deadline) {
                        fail("read_committed consumer of " + output + " not at the end " + ends + " within " + CLIENT_TIMEOUT);
                    }
                    c.poll(Duration.ofMillis(200)).forEach(r -> latest.put(r.key(), r.value()));
                }
                return latest;
            }
            long deadline = System.nanoTime() + timeout.toNanos();
            long nextFencingCheck = 0;
            while (!latest.equals(expected)) {
                if (System.nanoTime() > deadline) {
                    fail("within " + timeout + " the committed counts did not reach the expected ones; differing words "
                            + "(first 20): " + WordCount.differences(expected, latest) + "; broker counters before " + before
                            + ", now " + brokerCounters());
                }
                // A fencing stalls the application for a transaction timeout and more: say
                // so at once rather than when the time is up.
                if (System.nanoTime() > nextFencingCheck) {
                    Map<String, Long> now = brokerCounters();
                    assertEquals(before.get("fenced"), now.get("fenced"), "producers fenced while Streams counted; "
                            + "broker counters before " + before + ", now " + now);
                    nextFencingCheck = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
                }
                c.poll(Duration.ofMillis(200)).forEach(r -> latest.put(r.key(), r.value()));
            }
            return latest;
        }
    }

    /** A thread that keeps one core busy until {@code burning} is cleared: load on the host. */
    private static Thread burner(AtomicBoolean burning, int index) {
        Thread t = new Thread(() -> {
            long x = index;
            while (burning.get()) {
                for (int i = 0; i < 1_000_000; i++) {
                    x = x * 6364136223846793005L + 1442695040888963407L;
                }
            }
            if (x == 42) {
                System.out.print(""); // keeps the loop from being optimized away
            }
        }, "cpu-burner-" + index);
        t.setDaemon(true);
        return t;
    }

    private static final Pattern FENCED = Pattern.compile("^osprey_txn_fenced_producers_total (\\d+)$", Pattern.MULTILINE);
    private static final Pattern ABORTED = Pattern.compile("^osprey_txn_aborts_total (\\d+)$", Pattern.MULTILINE);
    private static final Pattern OUT_OF_ORDER = Pattern.compile("^osprey_error_codes_total\\{(?=[^}]*api=\"Produce\")"
            + "(?=[^}]*error=\"OUT_OF_ORDER_SEQUENCE_NUMBER\")[^}]*\\} (\\d+)$", Pattern.MULTILINE);

    /** The broker's fenced producers, aborted transactions and Produce OUT_OF_ORDER errors so far. */
    private static Map<String, Long> brokerCounters() {
        String metrics = BROKER.metrics();
        Map<String, Long> counters = new HashMap<>();
        counters.put("fenced", sum(FENCED.matcher(metrics)));
        counters.put("aborted", sum(ABORTED.matcher(metrics)));
        counters.put("outOfOrder", sum(OUT_OF_ORDER.matcher(metrics)));
        return counters;
    }

    private static long sum(Matcher m) {
        long total = 0;
        while (m.find()) {
            total += Long.parseLong(m.group(1));
        }
        return total;
    }
}
