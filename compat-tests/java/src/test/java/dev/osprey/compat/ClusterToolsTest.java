package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What the Java client and Kafka's cluster tools ask every broker: ApiVersions at the
 * client's own version, the features {@code kafka-features.sh describe} prints, and the
 * ACL commands, which a broker without an authorizer answers with SECURITY_DISABLED.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ClusterToolsTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String ACL_COMMAND = "org.apache.kafka.tools.AclCommand";
    private static final String FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand";
    private static final Pattern FEATURE = Pattern.compile(
            "^Feature: (\\S+)\\s+SupportedMinVersion: (\\S+)\\s+SupportedMaxVersion: (\\S+)\\s+"
                    + "FinalizedVersionLevel: (\\S+)\\s+Epoch: (\\S+)$");

    @Test
    void java_client_api_versions_is_answered_at_its_own_version_5() throws Exception {
        Map<String, Long> before = BROKER.requestsByVersion("ApiVersions");
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.describeCluster().clusterId().get(30, TimeUnit.SECONDS);
            // A second connection, to the node the metadata named: ApiVersions v5 then
            // carries the cluster id and node id, which must match this broker.
            admin.describeCluster().nodes().get(30, TimeUnit.SECONDS);
            admin.listTopics().names().get(30, TimeUnit.SECONDS);
        }
        Map<String, Long> after = BROKER.requestsByVersion("ApiVersions");
        Map<String, Long> sent = new HashMap<>();
        after.forEach((version, count) -> {
            long delta = count - before.getOrDefault(version, 0L);
            if (delta > 0) {
                sent.put(version, delta);
            }
        });
        // An older broker answers v5 with UNSUPPORTED_VERSION in v0 (counted as v0) and
        // the client asks again at v4: a wasted round trip on every connection.
        assertEquals(Set.of("5"), sent.keySet(), "ApiVersions requests by version during the Admin calls: " + sent);
    }

    /**
     * Without an authorizer Kafka reports every operation of the resource type. The Java
     * Admin describes topics with DescribeTopicPartitions and consumer groups (classic
     * protocol here) with DescribeGroups.
     */
    @Test
    void admin_gets_every_operation_of_topics_groups_and_the_cluster() throws Exception {
        String topic = "authorized-ops";
        String group = "authorized-ops-group";
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            Set<AclOperation> topicOps = admin.describeTopics(List.of(topic),
                            new DescribeTopicsOptions().includeAuthorizedOperations(true))
                    .allTopicNames().get(30, TimeUnit.SECONDS).get(topic).authorizedOperations();
            assertEquals(Set.of(AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS), topicOps);
            assertTrue(BROKER.requestsByVersion("DescribeTopicPartitions").values().stream().mapToLong(Long::longValue).sum() > 0,
                    "the Admin described the topic without DescribeTopicPartitions");

            Set<AclOperation> clusterOps = admin.describeCluster(
                            new DescribeClusterOptions().includeAuthorizedOperations(true))
                    .authorizedOperations().get(30, TimeUnit.SECONDS);
            assertEquals(Set.of(AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                    AclOperation.IDEMPOTENT_WRITE), clusterOps);
            // Not asked: not provided.
            assertNull(admin.describeCluster().authorizedOperations().get(30, TimeUnit.SECONDS));

            java.util.Properties props = BROKER.clientProps();
            props.put("group.id", group);
            props.put("group.protocol", "classic");
            try (KafkaConsumer<byte[], byte[]> consumer =
                    new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (consumer.assignment().isEmpty()) {
                    assertTrue(System.nanoTime() < deadline, "no assignment");
                    consumer.poll(Duration.ofMillis(200));
                }
                Set<AclOperation> groupOps = admin.describeConsumerGroups(List.of(group),
                                new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true))
                        .all().get(30, TimeUnit.SECONDS).get(group).authorizedOperations();
                assertEquals(Set.of(AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
                        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS), groupOps);
            }
        }
    }

    @Test
    void feature_command_describes_every_feature_kafka_4_4_reports() throws Exception {
        KafkaTool.Result described = KafkaTool.run(FEATURE_COMMAND,
                List.of("--bootstrap-server", BROKER.bootstrapServers(), "describe")).assertSuccess();
        Map<String, List<String>> features = new HashMap<>();
        for (String line : described.stdoutLines()) {
            Matcher m = FEATURE.matcher(line.strip());
            assertTrue(m.matches(), () -> "unexpected line '" + line + "'\n" + described.describe());
            features.put(m.group(1), List.of(m.group(2), m.group(3), m.group(4), m.group(5)));
        }
        assertEquals(Map.of(
                        // The Kafka release whose client APIs this broker serves.
                        "metadata.version", List.of("4.2-IV1", "4.2-IV1", "4.2-IV1", "1"),
                        // No KRaft quorum: the metadata log is this node's own.
                        "kraft.version", List.of("0", "0", "0", "1"),
                        // KIP-848 consumer groups.
                        "group.version", List.of("1", "1", "1", "1"),
                        // KIP-890 part 2, the default; osprey.transaction.version=1 picks 1.
                        "transaction.version", List.of("1", "2", "2", "1"),
                        // KIP-966, on as in a new Kafka 4.4 cluster.
                        "eligible.leader.replicas.version", List.of("0", "1", "1", "1"),
                        // KIP-932 share groups with KIP-1191 dead-letter queues, as a new
                        // Kafka 4.4 cluster (osprey.share.version 2).
                        "share.version", List.of("0", "2", "2", "1"),
                        // KIP-1071 streams groups, on as in a new Kafka 4.4 cluster.
                        "streams.version", List.of("0", "1", "1", "1")),
                features, described.describe());
    }

    @Test
    void acl_command_list_add_and_remove_report_that_no_authorizer_is_configured() throws Exception {
        String bootstrap = BROKER.bootstrapServers();
        // Kafka 4.4 without an authorizer prints these first lines and exits 1.
        assertAclCommandFails(List.of("--bootstrap-server", bootstrap, "--list"),
                "No Authorizer is configured on the broker");
        assertAclCommandFails(List.of("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:alice",
                "--operation", "Read", "--topic", "acl-topic"), "No Authorizer is configured on the broker");
        assertAclCommandFails(List.of("--bootstrap-server", bootstrap, "--remove", "--force", "--allow-principal",
                "User:alice", "--operation", "Read", "--topic", "acl-topic"), "No Authorizer is configured.");
    }

    private static void assertAclCommandFails(List<String> args, String message) throws Exception {
        KafkaTool.Result result = KafkaTool.run(ACL_COMMAND, args);
        assertEquals(1, result.exitCode(), result.describe());
        assertEquals("Error while executing ACL command: "
                        + "org.apache.kafka.common.errors.SecurityDisabledException: " + message,
                result.stdoutLines().get(0), result.describe());
    }
}
