package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The Admin client, one operation family per test, each on its own topic. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AdminClientTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final long TIMEOUT_MS = 30_000;
    private static Admin admin;

    // Per test, not per class: OspreyBroker replaces a broker that stops answering.
    @BeforeEach
    void connect() {
        Properties props = BROKER.clientProps();
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "compat-admin");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(TIMEOUT_MS));
        admin = Admin.create(props);
    }

    @AfterEach
    void disconnect() {
        if (admin != null) {
            admin.close();
        }
    }

    @Test
    void created_topic_with_configs_is_listed_and_described() throws Exception {
        String topic = "admin-create";
        NewTopic newTopic = new NewTopic(topic, 2, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
        get(admin.createTopics(List.of(newTopic)).all());

        assertTrue(get(admin.listTopics().names()).contains(topic), "listTopics names " + topic);
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertNotNull(d.topicId());
        assertEquals(2, d.partitions().size());
        for (TopicPartitionInfo p : d.partitions()) {
            assertEquals(BROKER.nodeId(), p.leader().id(), "leader of partition " + p.partition());
            assertEquals(List.of(BROKER.nodeId()), p.replicas().stream().map(Node::id).toList());
            assertEquals(List.of(BROKER.nodeId()), p.isr().stream().map(Node::id).toList());
        }

        Config config = topicConfig(topic);
        assertDynamic(config, "retention.ms", "3600000");
        assertDynamic(config, "cleanup.policy", "delete");
    }

    @Test
    void creating_an_existing_topic_fails_with_topic_exists() throws Exception {
        String topic = "admin-duplicate";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS));
        assertInstanceOf(TopicExistsException.class, e.getCause());
    }

    @Test
    void create_partitions_grows_the_topic() throws Exception {
        String topic = "admin-grow";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(List.of(0, 1, 2, 3), d.partitions().stream().map(TopicPartitionInfo::partition).toList());
        for (TopicPartitionInfo p : d.partitions()) {
            assertEquals(BROKER.nodeId(), p.leader().id(), "leader of new partition " + p.partition());
        }
    }

    @Test
    void describe_configs_of_the_broker_shows_its_settings() throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(BROKER.nodeId()));
        Config config = get(admin.describeConfigs(List.of(resource)).all()).get(resource);
        assertFalse(config.entries().isEmpty(), "broker configs");
        ConfigEntry partitions = config.get("num.partitions");
        assertNotNull(partitions, "num.partitions in " + names(config));
        assertEquals("1", partitions.value());
        ConfigEntry nodeId = config.get("node.id");
        assertNotNull(nodeId, "node.id in " + names(config));
        assertEquals(String.valueOf(BROKER.nodeId()), nodeId.value());
    }

    @Test
    void incremental_alter_configs_sets_and_deletes_a_topic_override() throws Exception {
        String topic = "admin-alter";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        String defaultRetention = topicConfig(topic).get("retention.ms").value();

        get(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "120000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "65536"), AlterConfigOp.OpType.SET)))).all());
        Config altered = topicConfig(topic);
        assertDynamic(altered, "retention.ms", "120000");
        assertDynamic(altered, "max.message.bytes", "65536");

        get(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all());
        Config reverted = topicConfig(topic);
        ConfigEntry retention = reverted.get("retention.ms");
        assertEquals(defaultRetention, retention.value());
        assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source());
        assertDynamic(reverted, "max.message.bytes", "65536");
    }

    @Test
    void delete_records_moves_the_log_start_offset() throws Exception {
        String topic = "admin-delete-records";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        produce(topic, 10);
        TopicPartition tp = new TopicPartition(topic, 0);

        Map<TopicPartition, KafkaFuture<DeletedRecords>> deleted =
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks();
        assertEquals(4L, get(deleted.get(tp)).lowWatermark());

        assertEquals(4L, get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all()).get(tp).offset());
        assertEquals(10L, get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all()).get(tp).offset());
    }

    @Test
    void describe_cluster_shows_this_single_broker() throws Exception {
        DescribeClusterResult cluster = admin.describeCluster();
        Collection<Node> nodes = get(cluster.nodes());
        assertEquals(1, nodes.size(), "nodes " + nodes);
        Node node = nodes.iterator().next();
        assertEquals(BROKER.nodeId(), node.id());
        assertEquals(BROKER.port(), node.port());
        String clusterId = get(cluster.clusterId());
        assertNotNull(clusterId);
        assertFalse(clusterId.isEmpty());
        assertEquals(BROKER.nodeId(), get(cluster.controller()).id());
    }

    @Test
    void describe_log_dirs_lists_each_partition_with_its_size() throws Exception {
        String topic = "admin-log-dirs";
        get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
        produce(topic, 20);

        Map<Integer, Map<String, LogDirDescription>> all =
                get(admin.describeLogDirs(List.of(BROKER.nodeId())).allDescriptions());
        Map<String, LogDirDescription> dirs = all.get(BROKER.nodeId());
        assertNotNull(dirs, "log dirs of broker " + BROKER.nodeId() + " in " + all);
        assertEquals(1, dirs.size(), "log dirs " + dirs.keySet());
        LogDirDescription dir = dirs.values().iterator().next();
        assertEquals(null, dir.error());
        long total = 0;
        for (int p = 0; p < 2; p++) {
            ReplicaInfo replica = dir.replicaInfos().get(new TopicPartition(topic, p));
            assertNotNull(replica, topic + "-" + p + " in " + dir.replicaInfos().keySet());
            total += replica.size();
        }
        assertTrue(total > 0, "bytes on disk for 20 records, got " + total);
    }

    @Test
    void deleted_topic_is_gone_from_list_and_describe() throws Exception {
        String topic = "admin-delete";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        produce(topic, 3);
        get(admin.deleteTopics(List.of(topic)).all());

        assertFalse(get(admin.listTopics().names()).contains(topic), "listTopics after delete");
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, e.getCause());

        // The name can be used again, and the new topic starts empty.
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        TopicPartition tp = new TopicPartition(topic, 0);
        assertEquals(0L, get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all()).get(tp).offset());
    }

    private static void produce(String topic, int count) throws Exception {
        Properties props = BROKER.clientProps();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<?>> acks = new java.util.ArrayList<>();
            for (int i = 0; i < count; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            for (java.util.concurrent.Future<?> ack : acks) {
                ack.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            }
        }
    }

    private static Config topicConfig(String topic) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return get(admin.describeConfigs(List.of(resource)).all()).get(resource);
    }

    private static void assertDynamic(Config config, String name, String value) {
        ConfigEntry e = config.get(name);
        assertNotNull(e, name + " in " + names(config));
        assertEquals(value, e.value(), name);
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, e.source(), "source of " + name);
    }

    private static Set<String> names(Config config) {
        return config.entries().stream().map(ConfigEntry::name).collect(java.util.stream.Collectors.toCollection(java.util.TreeSet::new));
    }

    private static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }
}
