package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
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
    private static final Pattern API_VERSIONS_REQUESTS =
            Pattern.compile("^osprey_requests_total\\{(?=[^}]*api=\"ApiVersions\")[^}]*version=\"(\\d+)\"[^}]*\\} (\\d+)$",
                    Pattern.MULTILINE);
    private static final Pattern FEATURE = Pattern.compile(
            "^Feature: (\\S+)\\s+SupportedMinVersion: (\\S+)\\s+SupportedMaxVersion: (\\S+)\\s+"
                    + "FinalizedVersionLevel: (\\S+)\\s+Epoch: (\\S+)$");

    @Test
    void java_client_api_versions_is_answered_at_its_own_version_5() throws Exception {
        Map<String, Long> before = apiVersionsRequestsByVersion();
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            admin.describeCluster().clusterId().get(30, TimeUnit.SECONDS);
            // A second connection, to the node the metadata named: ApiVersions v5 then
            // carries the cluster id and node id, which must match this broker.
            admin.describeCluster().nodes().get(30, TimeUnit.SECONDS);
            admin.listTopics().names().get(30, TimeUnit.SECONDS);
        }
        Map<String, Long> after = apiVersionsRequestsByVersion();
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
                        // Not implemented, so at level 0.
                        "eligible.leader.replicas.version", List.of("0", "0", "0", "1"),
                        "share.version", List.of("0", "0", "0", "1"),
                        "streams.version", List.of("0", "0", "0", "1")),
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

    /** {@code osprey_requests_total} of ApiVersions, by version label. */
    private static Map<String, Long> apiVersionsRequestsByVersion() {
        Map<String, Long> counts = new HashMap<>();
        Matcher m = API_VERSIONS_REQUESTS.matcher(BROKER.metrics());
        while (m.find()) {
            counts.merge(m.group(1), Long.parseLong(m.group(2)), Long::sum);
        }
        return counts;
    }
}
