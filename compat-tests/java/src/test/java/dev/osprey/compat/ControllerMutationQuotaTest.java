package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DeleteTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.ThrottlingQuotaExceededException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The controller mutation quota (KIP-599) through the Java Admin client: with {@code
 * controller_mutation_rate=1} for its client id (a bucket of 11 partitions), topics are
 * created until the bucket is below zero; then CreateTopics, CreatePartitions and
 * DeleteTopics fail with {@link ThrottlingQuotaExceededException} and its throttle time when
 * the client is told not to retry, and succeed once the client waits the throttle out, as it
 * does by default. Another client id is not held back. The broker mutes a throttled
 * connection for the throttle time (KIP-219), so each refusal is asked on a connection of
 * its own.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ControllerMutationQuotaTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static Admin admin(String clientId) {
        Properties props = BROKER.clientProps();
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, clientId);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        return Admin.create(props);
    }

    @Test
    void strict_requests_are_refused_with_a_throttle_time_and_succeed_after_it() throws Exception {
        try (Admin admin = admin("quota-admin"); Admin other = admin("other-admin")) {
            ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "quota-admin"));
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                    List.of(new ClientQuotaAlteration.Op("controller_mutation_rate", 1.0))))).all().get();

            // 11 tokens: 10 partitions leave 1, and 20 more are accepted (the bucket was not
            // below zero), leaving -19: about 19 s of refusals.
            admin.createTopics(List.of(new NewTopic("cmq-a", 10, (short) 1))).all().get(30, TimeUnit.SECONDS);
            admin.createTopics(List.of(new NewTopic("cmq-b", 20, (short) 1))).all().get(30, TimeUnit.SECONDS);

            CreateTopicsOptions noRetry = new CreateTopicsOptions().retryOnQuotaViolation(false);
            ExecutionException created = assertThrows(ExecutionException.class, () -> admin
                    .createTopics(List.of(new NewTopic("cmq-c", 1, (short) 1)), noRetry).all().get(30, TimeUnit.SECONDS));
            ThrottlingQuotaExceededException throttled =
                    assertInstanceOf(ThrottlingQuotaExceededException.class, created.getCause());
            System.out.println("CreateTopics refused: " + throttled.getMessage() + ", throttle "
                    + throttled.throttleTimeMs() + " ms");
            assertTrue(throttled.throttleTimeMs() > 0 && throttled.throttleTimeMs() <= 19_000,
                    "throttle " + throttled.throttleTimeMs());

            // The broker mutes a connection for its throttle (KIP-219), so each refusal
            // below is asked on a new connection of the same client id.
            try (Admin second = admin("quota-admin"); Admin third = admin("quota-admin")) {
                ExecutionException grown = assertThrows(ExecutionException.class, () -> second
                        .createPartitions(Map.of("cmq-b", NewPartitions.increaseTo(21)),
                                new CreatePartitionsOptions().retryOnQuotaViolation(false))
                        .all().get(30, TimeUnit.SECONDS));
                assertInstanceOf(ThrottlingQuotaExceededException.class, grown.getCause());
                ExecutionException deleted = assertThrows(ExecutionException.class, () -> third
                        .deleteTopics(List.of("cmq-a"), new DeleteTopicsOptions().retryOnQuotaViolation(false))
                        .all().get(30, TimeUnit.SECONDS));
                assertInstanceOf(ThrottlingQuotaExceededException.class, deleted.getCause());
            }

            // Another client id has no quota.
            other.createTopics(List.of(new NewTopic("cmq-other", 20, (short) 1))).all().get(30, TimeUnit.SECONDS);

            // By default the client waits the throttle out and retries: the topic is created.
            admin.createTopics(List.of(new NewTopic("cmq-c", 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            Set<String> names = admin.listTopics().names().get(30, TimeUnit.SECONDS);
            assertTrue(names.containsAll(Set.of("cmq-a", "cmq-b", "cmq-c", "cmq-other")), names.toString());
            assertEquals(20, admin.describeTopics(List.of("cmq-b")).allTopicNames().get().get("cmq-b")
                    .partitions().size(), "the refused CreatePartitions added nothing");
        }
    }
}
