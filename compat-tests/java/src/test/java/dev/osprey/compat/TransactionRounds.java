package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Four transactions of one Java producer (commit, abort, commit, commit), each with offsets
 * sent to a group, checked from the outside: what read_committed sees, the group's offset,
 * and the producer epoch the coordinator and the partition report. That epoch tells which
 * transaction protocol ran: transaction version 2 (KIP-890 part 2) bumps it at every
 * transaction end, version 1 leaves it at 0.
 */
final class TransactionRounds {
    private static final Duration TIMEOUT = Duration.ofSeconds(30);
    private static final List<String> FINISHES = List.of("commit", "abort", "commit", "commit");

    private TransactionRounds() {}

    /** Runs the four transactions against {@code broker}; names start with {@code name}. */
    static void run(OspreyBroker broker, String name, int expectedEpoch) throws Exception {
        String topic = name;
        String input = name + "-input";
        String group = name + "-group";
        TopicPartition tp = new TopicPartition(topic, 0);
        TopicPartition inputTp = new TopicPartition(input, 0);
        try (Admin admin = Admin.create(broker.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1), new NewTopic(input, 1, (short) 1)))
                    .all().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
        List<String> committed = new ArrayList<>();
        Properties props = broker.clientProps();
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-id");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            for (int t = 0; t < FINISHES.size(); t++) {
                boolean commit = FINISHES.get(t).equals("commit");
                producer.beginTransaction();
                for (int i = 0; i < 5; i++) {
                    String value = FINISHES.get(t) + "-" + t + "-" + i;
                    producer.send(new ProducerRecord<>(topic, 0, null, value));
                    if (commit) {
                        committed.add(value);
                    }
                }
                producer.sendOffsetsToTransaction(
                        Map.of(inputTp, new OffsetAndMetadata(100L * (t + 1))), new ConsumerGroupMetadata(group));
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.flush(); // the aborted records are stored, then aborted
                    producer.abortTransaction();
                }
            }
        }
        assertEquals(committed, readCommitted(broker, tp, committed.size()));
        try (Admin admin = Admin.create(broker.clientProps())) {
            var described = admin.describeTransactions(List.of(name + "-id")).description(name + "-id")
                    .get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(expectedEpoch, described.producerEpoch(), "the coordinator's epoch: " + described);
            var producers = admin.describeProducers(List.of(tp)).partitionResult(tp)
                    .get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(1, producers.activeProducers().size(), producers.toString());
            assertEquals(expectedEpoch, producers.activeProducers().get(0).producerEpoch(),
                    "the epoch of the partition's last marker: " + producers);
            // The aborted transaction's offsets (200) never showed; the last commit's did.
            var offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(400L, offsets.get(inputTp).offset());
        }
    }

    /** What a read_committed consumer finds in {@code tp}, reading until {@code count} values. */
    private static List<String> readCommitted(OspreyBroker broker, TopicPartition tp, int count) {
        Properties props = broker.clientProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp), TIMEOUT).get(tp);
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (c.position(tp, TIMEOUT) < end && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
            }
        }
        return values;
    }
}
