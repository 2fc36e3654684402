package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Dynamic broker configs, as {@code kafka-configs.sh --entity-type brokers} and the Admin
 * client set them: a cluster-wide default ({@code --entity-default}) and a per-broker value
 * ({@code --entity-name}), described with Kafka's sources and synonyms, picked up at once
 * by a topic without overrides, kept across a restart, deleted back to the static value,
 * and a key Kafka does not let change at run time refused.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class DynamicBrokerConfigsTest {
    /** The static value, so that deleting the dynamic ones visibly brings it back. */
    private static final String STATIC_RETENTION_MS = "86400000";

    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker(List.of("log.retention.ms=" + STATIC_RETENTION_MS));

    private static final String CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand";
    private static final String TOPIC = "dynamic-defaults-topic";
    /** Larger than the dynamic message.max.bytes below, far smaller than the static one. */
    private static final int LARGE_RECORD_BYTES = 50_000;

    @Test
    void cluster_default_and_per_broker_configs_apply_live_persist_and_delete_back_to_static() throws Exception {
        String node = Integer.toString(BROKER.nodeId());
        ConfigResource brokerResource = new ConfigResource(ConfigResource.Type.BROKER, node);
        ConfigResource defaultResource = new ConfigResource(ConfigResource.Type.BROKER, "");
        ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, TOPIC);
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(TOPIC, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        produce(LARGE_RECORD_BYTES); // the static message.max.bytes takes it

        KafkaTool.Result altered = configs("--alter", "--entity-type", "brokers", "--entity-default",
                "--add-config", "log.retention.ms=3600000,message.max.bytes=20000");
        assertEquals(List.of("Completed updating default config for brokers in the cluster."), altered.stdoutLines(),
                altered.describe());
        altered = configs("--alter", "--entity-type", "brokers", "--entity-name", node,
                "--add-config", "log.retention.ms=1800000");
        assertEquals(List.of("Completed updating config for broker " + node + "."), altered.stdoutLines(),
                altered.describe());

        KafkaTool.Result described = configs("--describe", "--entity-type", "brokers", "--entity-default");
        assertEquals("Default configs for brokers in the cluster are:", described.stdoutLines().get(0), described.describe());
        assertHasLine(described, "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000, STATIC_BROKER_CONFIG:log.retention.ms=" + STATIC_RETENTION_MS + "}");
        assertHasLine(described, "  message.max.bytes=20000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=20000, DEFAULT_CONFIG:message.max.bytes=1048588}");
        described = configs("--describe", "--entity-type", "brokers", "--entity-name", node);
        assertEquals("Dynamic configs for broker " + node + " are:", described.stdoutLines().get(0), described.describe());
        assertHasLine(described, "  log.retention.ms=1800000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=1800000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000, STATIC_BROKER_CONFIG:log.retention.ms=" + STATIC_RETENTION_MS + "}");

        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Config brokerConfig = describe(admin, brokerResource);
            assertEntry(brokerConfig, "log.retention.ms", "1800000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            assertEntry(brokerConfig, "message.max.bytes", "20000", ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
            assertEntry(brokerConfig, "num.partitions", "1", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
            assertEquals(false, brokerConfig.get("log.retention.ms").isReadOnly(), "a dynamic config");
            assertEquals(true, brokerConfig.get("log.dirs").isReadOnly(), "a static config");

            // The topic has no override of its own: it follows the new defaults.
            Config topicConfig = describe(admin, topicResource);
            assertEntry(topicConfig, "retention.ms", "1800000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            assertEntry(topicConfig, "max.message.bytes", "20000", ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);

            // A topic created now gets them too, and CreateTopics says where they came from.
            Config created = admin.createTopics(List.of(new NewTopic(TOPIC + "-new", 1, (short) 1)))
                    .config(TOPIC + "-new").get(30, TimeUnit.SECONDS);
            assertEntry(created, "retention.ms", "1800000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            assertEntry(created, "max.message.bytes", "20000", ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
            assertEntry(created, "segment.bytes", "1073741824", ConfigEntry.ConfigSource.DEFAULT_CONFIG);

            // Keys Kafka does not change at run time are refused, and nothing is stored.
            for (String key : List.of("log.dirs", "log.retention.hours")) {
                AlterConfigOp set = new AlterConfigOp(new ConfigEntry(key, "1"), AlterConfigOp.OpType.SET);
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> admin.incrementalAlterConfigs(Map.of(brokerResource, List.of(set))).all().get(30, TimeUnit.SECONDS));
                assertInstanceOf(InvalidRequestException.class, e.getCause());
                assertEquals("Cannot update these configs dynamically: Set(" + key + ")", e.getCause().getMessage());
            }
            // A bad value for a dynamic key is refused too.
            AlterConfigOp bad = new AlterConfigOp(new ConfigEntry("log.retention.ms", "soon"), AlterConfigOp.OpType.SET);
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.incrementalAlterConfigs(Map.of(defaultResource, List.of(bad))).all().get(30, TimeUnit.SECONDS));
            assertInstanceOf(InvalidRequestException.class, e.getCause());
            // validate_only checks and changes nothing.
            AlterConfigOp tiny = new AlterConfigOp(new ConfigEntry("log.retention.ms", "1000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(brokerResource, List.of(tiny)), new AlterConfigsOptions().validateOnly(true))
                    .all().get(30, TimeUnit.SECONDS);
            assertEntry(describe(admin, brokerResource), "log.retention.ms", "1800000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
        }
        assertRecordTooLarge();

        BROKER.kill9AndRestart();
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Config brokerConfig = describe(admin, brokerResource);
            assertEntry(brokerConfig, "log.retention.ms", "1800000", ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG);
            assertEntry(describe(admin, topicResource), "max.message.bytes", "20000",
                    ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
        }
        assertRecordTooLarge();

        KafkaTool.Result deleted = configs("--alter", "--entity-type", "brokers", "--entity-name", node,
                "--delete-config", "log.retention.ms");
        assertEquals(List.of("Completed updating config for broker " + node + "."), deleted.stdoutLines(), deleted.describe());
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            assertEntry(describe(admin, topicResource), "retention.ms", "3600000",
                    ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
        }
        deleted = configs("--alter", "--entity-type", "brokers", "--entity-default",
                "--delete-config", "log.retention.ms,message.max.bytes");
        assertEquals(List.of("Completed updating default config for brokers in the cluster."), deleted.stdoutLines(),
                deleted.describe());
        described = configs("--describe", "--entity-type", "brokers", "--entity-default");
        assertEquals(List.of("Default configs for brokers in the cluster are:"), described.stdoutLines(), described.describe());
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Config topicConfig = describe(admin, topicResource);
            assertEntry(topicConfig, "retention.ms", STATIC_RETENTION_MS, ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG);
            assertEntry(topicConfig, "max.message.bytes", "1048588", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
        }
        produce(LARGE_RECORD_BYTES); // the static message.max.bytes is back
    }

    private static void assertRecordTooLarge() throws Exception {
        ExecutionException e = assertThrows(ExecutionException.class, () -> produce(LARGE_RECORD_BYTES),
                "a record over the dynamic message.max.bytes");
        assertInstanceOf(RecordTooLargeException.class, e.getCause());
    }

    /** Produces one record of {@code bytes} and waits until it is acknowledged. */
    private static void produce(int bytes) throws Exception {
        Properties props = BROKER.clientProps();
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(10 * bytes));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.send(new ProducerRecord<>(TOPIC, new byte[bytes])).get(60, TimeUnit.SECONDS);
        }
    }

    private static Config describe(Admin admin, ConfigResource resource) throws Exception {
        return admin.describeConfigs(List.of(resource), new DescribeConfigsOptions().includeSynonyms(true))
                .all().get(30, TimeUnit.SECONDS).get(resource);
    }

    private static void assertEntry(Config config, String name, String value, ConfigEntry.ConfigSource source) {
        ConfigEntry entry = config.get(name);
        assertEquals(value, entry.value(), name + ": " + entry);
        assertEquals(source, entry.source(), name + ": " + entry);
    }

    private static void assertHasLine(KafkaTool.Result result, String line) {
        assertTrue(result.stdoutLines().contains(line), "no line '" + line + "' in\n" + result.describe());
    }

    private static KafkaTool.Result configs(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", BROKER.bootstrapServers()));
        all.addAll(List.of(args));
        return KafkaTool.run(CONFIG_COMMAND, all).assertSuccess();
    }
}
