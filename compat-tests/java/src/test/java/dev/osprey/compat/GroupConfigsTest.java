package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatRequestData;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.ConsumerGroupHeartbeatRequest;
import org.apache.kafka.common.requests.ConsumerGroupHeartbeatResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Group configs (ConfigResource type GROUP, KIP-848's per-group session timeout and
 * heartbeat interval): set and described with {@code kafka-configs.sh --entity-type groups}
 * and the Admin client, checked against the broker's bounds, kept across a broker restart,
 * and given to the group's members in their ConsumerGroupHeartbeat responses.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class GroupConfigsTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand";

    @Test
    void group_configs_are_set_described_kept_across_a_restart_and_used_by_the_group() throws Exception {
        String group = "configured-group";
        KafkaTool.Result altered = configs("--alter", "--entity-type", "groups", "--entity-name", group,
                "--add-config", "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000");
        assertEquals(List.of("Completed updating config for group " + group + "."), altered.stdoutLines(), altered.describe());

        KafkaTool.Result described = configs("--describe", "--entity-type", "groups", "--entity-name", group);
        List<String> lines = described.stdoutLines();
        assertEquals("Dynamic configs for group " + group + " are:", lines.get(0), described.describe());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000")),
                described.describe());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000")),
                described.describe());

        ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Config config = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS).get(resource);
            ConfigEntry session = config.get("consumer.session.timeout.ms");
            assertEquals("50000", session.value());
            assertEquals(ConfigEntry.ConfigSource.DYNAMIC_GROUP_CONFIG, session.source());

            // Below group.consumer.min.heartbeat.interval.ms (5000): refused, nothing changes.
            AlterConfigOp tooShort = new AlterConfigOp(new ConfigEntry("consumer.heartbeat.interval.ms", "100"), AlterConfigOp.OpType.SET);
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.incrementalAlterConfigs(Map.of(resource, List.of(tooShort))).all().get(30, TimeUnit.SECONDS));
            assertInstanceOf(InvalidConfigurationException.class, e.getCause());
            AlterConfigOp unknown = new AlterConfigOp(new ConfigEntry("consumer.no.such.config", "1"), AlterConfigOp.OpType.SET);
            e = assertThrows(ExecutionException.class,
                    () -> admin.incrementalAlterConfigs(Map.of(resource, List.of(unknown))).all().get(30, TimeUnit.SECONDS));
            assertInstanceOf(InvalidConfigurationException.class, e.getCause());
        }

        BROKER.kill9AndRestart();
        try (Admin admin = Admin.create(BROKER.clientProps())) {
            Config config = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS).get(resource);
            assertEquals("50000", config.get("consumer.session.timeout.ms").value(), "kept across the restart");
            assertEquals("6000", config.get("consumer.heartbeat.interval.ms").value(), "kept across the restart");
            admin.createTopics(List.of(new NewTopic("configured-topic", 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }

        assertEquals(6000, joinAndReadHeartbeatInterval(group), "the group's heartbeat interval");
        assertEquals(5000, joinAndReadHeartbeatInterval("unconfigured-group"), "the broker's group.consumer.heartbeat.interval.ms");

        KafkaTool.Result removed = configs("--alter", "--entity-type", "groups", "--entity-name", group,
                "--delete-config", "consumer.heartbeat.interval.ms");
        assertEquals(List.of("Completed updating config for group " + group + "."), removed.stdoutLines(), removed.describe());
        assertEquals(5000, joinAndReadHeartbeatInterval(group), "back to the broker's default once deleted");
    }

    /**
     * Joins {@code group} with one ConsumerGroupHeartbeat on a socket of its own (the
     * consumer does not expose the interval it was given) and returns the response's
     * heartbeat interval. The coordinator is the single broker.
     */
    private static int joinAndReadHeartbeatInterval(String group) throws Exception {
        ConsumerGroupHeartbeatRequestData data = new ConsumerGroupHeartbeatRequestData()
                .setGroupId(group)
                .setMemberId(Uuid.randomUuid().toString())
                .setMemberEpoch(0)
                .setRebalanceTimeoutMs(30000)
                .setSubscribedTopicNames(List.of("configured-topic"))
                .setTopicPartitions(new ArrayList<>());
        short version = 1;
        ConsumerGroupHeartbeatRequest request = new ConsumerGroupHeartbeatRequest.Builder(data).build(version);
        RequestHeader header = new RequestHeader(ApiKeys.CONSUMER_GROUP_HEARTBEAT, version, "group-configs-test", 1);
        ByteBuffer bytes = request.serializeWithHeader(header);
        try (Socket socket = new Socket(BROKER.bootstrapServers().split(":")[0], BROKER.port())) {
            socket.setSoTimeout(30_000);
            DataOutputStream out = new DataOutputStream(socket.getOutputStream());
            out.writeInt(bytes.remaining());
            out.write(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining());
            out.flush();
            DataInputStream in = new DataInputStream(socket.getInputStream());
            byte[] payload = new byte[in.readInt()];
            in.readFully(payload);
            AbstractResponse parsed = AbstractResponse.parseResponse(ByteBuffer.wrap(payload), header);
            ConsumerGroupHeartbeatResponseData response = ((ConsumerGroupHeartbeatResponse) parsed).data();
            assertEquals(0, response.errorCode(), String.valueOf(response.errorMessage()));
            return response.heartbeatIntervalMs();
        }
    }

    private static KafkaTool.Result configs(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", BROKER.bootstrapServers()));
        all.addAll(List.of(args));
        return KafkaTool.run(CONFIG_COMMAND, all).assertSuccess();
    }
}
