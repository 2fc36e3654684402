package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.StreamsGroupDescription;
import org.apache.kafka.clients.admin.StreamsGroupMemberAssignment;
import org.apache.kafka.clients.admin.StreamsGroupMemberDescription;
import org.apache.kafka.clients.admin.StreamsGroupSubtopologyDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.message.StreamsGroupDescribeRequestData;
import org.apache.kafka.common.message.StreamsGroupDescribeResponseData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatRequestData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.StreamsGroupDescribeRequest;
import org.apache.kafka.common.requests.StreamsGroupDescribeResponse;
import org.apache.kafka.common.requests.StreamsGroupHeartbeatRequest;
import org.apache.kafka.common.requests.StreamsGroupHeartbeatResponse;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Streams groups (KIP-1071): Kafka Streams 4.4 with {@code group.protocol=streams}, the
 * group coordinator assigning the tasks (StreamsGroupHeartbeat) and the broker creating
 * the application's internal topics.
 *
 * <ul>
 *   <li>A word count with {@code processing.guarantee=exactly_once_v2} (a repartition
 *       topic, a changelog-backed store, two stream threads per instance) and the group
 *       config {@code streams.num.standby.replicas=1}, scaled from one instance to three and
 *       back to one while input is produced, the broker SIGKILLed and restarted in the
 *       middle: each scale-out and scale-in ends with every task active exactly once, each
 *       stateful task's standby on another instance, and the final counts, read
 *       read_committed, are exact. Kafka's {@code kafka-streams-groups.sh}
 *       (StreamsGroupCommand) lists the group, describes its members, its state and its
 *       offsets, and deletes it and its internal topics once the application stopped.
 *   <li>StreamsGroupHeartbeat and StreamsGroupDescribe at version 0, which Kafka Streams
 *       4.4 and the Admin client never send (they speak v1), written and read with
 *       kafka-clients' own request and response classes.
 * </ul>
 *
 * <p>{@code -Dcompat.kafka.bootstrap=HOST:PORT} runs the tests against that broker
 * instead, to prove them against Kafka itself (a Kafka 4.4 node formatted with
 * {@code --feature streams.version=1}); {@code -Dcompat.kafka.restart=COMMAND} is then the
 * shell command that kills that node with SIGKILL and returns once it is started again
 * ({@code compat-tests/java/kafka-node.sh} does both). Osprey is started but not used.
 */
@Timeout(value = 420, unit = TimeUnit.SECONDS)
class StreamsGroupProtocolTest {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker();

    private static final String KAFKA_BOOTSTRAP = System.getProperty("compat.kafka.bootstrap", "");
    private static final String KAFKA_RESTART = System.getProperty("compat.kafka.restart", "");
    private static final String STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand";
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    /** How long the group may take to settle on an assignment or the application to count. */
    private static final Duration WAIT = Duration.ofSeconds(120);
    private static final int PARTITIONS = 4;
    private static final int THREADS_PER_INSTANCE = 2;
    private static final int LINES_PER_BATCH = 200;
    private static final int VOCABULARY = 300;
    private static final int MAX_WORDS_PER_LINE = 6;

    @Test
    void word_count_scaled_from_one_to_three_instances_and_back_through_a_broker_restart_is_exact() throws Exception {
        String app = "sg-wordcount";
        String input = "sg-lines";
        String output = "sg-counts";
        try (Admin admin = Admin.create(clientProps())) {
            admin.createTopics(Stream.of(input, output).map(t -> new NewTopic(t, PARTITIONS, (short) 1)).toList())
                    .all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            // A standby of each stateful task on another instance (Kafka Streams'
            // num.standby.replicas is the group's config with the streams protocol).
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, app),
                    List.of(new AlterConfigOp(new ConfigEntry("streams.num.standby.replicas", "1"),
                            AlterConfigOp.OpType.SET)))).all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
        Map<String, Long> streamsRequestsBefore = requestsByVersion("StreamsGroupHeartbeat");
        List<String> steps = new ArrayList<>();
        long started = System.nanoTime();
        List<Instance> instances = new ArrayList<>();
        Feeder feeder = new Feeder(input);
        Thread feeding = new Thread(feeder, "sg-feeder");
        Map<String, Long> expected;
        Map<String, Long> heartbeatsSent;
        try (Admin admin = Admin.create(clientProps())) {
            instances.add(Instance.start(app, input, output, 0));
            instances.get(0).awaitRunning();
            steps.add(step(started, "instance 0 RUNNING"));
            feeding.start();
            Set<String> allTasks = awaitAssignment(admin, app, instances, steps, started);

            // The internal topics the broker created from the topology: the repartition
            // topic and the store's changelog, with the source topics' partition count and
            // the configs the topology gave.
            StreamsGroupDescription topology = admin.describeStreamsGroups(List.of(app)).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(app);
            String repartition = app + "-word-counts-repartition";
            String changelog = app + "-word-counts-changelog";
            assertEquals(Set.of(repartition), topology.subtopologies().stream()
                    .flatMap(s -> s.repartitionSourceTopics().keySet().stream()).collect(Collectors.toSet()));
            assertEquals(Set.of(changelog), topology.subtopologies().stream()
                    .flatMap(s -> s.stateChangelogTopics().keySet().stream()).collect(Collectors.toSet()));
            Map<String, Integer> internal = admin.describeTopics(List.of(repartition, changelog)).allTopicNames()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).entrySet().stream()
                    .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().partitions().size()));
            assertEquals(Map.of(repartition, PARTITIONS, changelog, PARTITIONS), internal, "internal topics");
            Map<ConfigResource, Config> configs = admin.describeConfigs(List.of(
                            new ConfigResource(ConfigResource.Type.TOPIC, repartition),
                            new ConfigResource(ConfigResource.Type.TOPIC, changelog)))
                    .all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals("delete", topicConfig(configs, repartition, "cleanup.policy"));
            assertEquals("-1", topicConfig(configs, repartition, "retention.ms"));
            assertEquals("compact", topicConfig(configs, changelog, "cleanup.policy"));

            // One to three instances while lines keep coming.
            instances.add(Instance.start(app, input, output, 1));
            instances.add(Instance.start(app, input, output, 2));
            for (Instance instance : instances) {
                instance.awaitRunning();
            }
            steps.add(step(started, "instances 1 and 2 RUNNING"));
            assertEquals(allTasks, awaitAssignment(admin, app, instances, steps, started));
            feeder.awaitMoreLines(LINES_PER_BATCH * 3);
            describeWithTheTool(app, instances.size() * THREADS_PER_INSTANCE);

            // The broker goes down hard and comes back with the group, its topology and
            // its assignment loaded from __consumer_offsets.
            feeder.awaitMoreLines(LINES_PER_BATCH * 3);
            // (The broker's request counters start again from 0 at its restart.)
            heartbeatsSent = delta(streamsRequestsBefore, requestsByVersion("StreamsGroupHeartbeat"));
            restartBroker();
            steps.add(step(started, "broker restarted"));
            feeder.awaitMoreLines(LINES_PER_BATCH * 5);
            assertEquals(allTasks, awaitAssignment(admin, app, instances, steps, started));

            // Three to one.
            instances.remove(2).close();
            instances.remove(1).close();
            steps.add(step(started, "instances 1 and 2 closed"));
            assertEquals(allTasks, awaitAssignment(admin, app, instances, steps, started));
            feeder.awaitMoreLines(LINES_PER_BATCH * 3);

            feeder.stop();
            feeding.join(WAIT.toMillis());
            assertFalse(feeding.isAlive(), "the feeder did not stop");
            if (feeder.failure.get() != null) {
                throw new AssertionError("producing the input failed", feeder.failure.get());
            }
            expected = feeder.expected;
            Map<String, Long> counted = latestCounts(output, expected, WAIT);
            assertEquals(expected, counted, "counts read_committed while Streams runs");
            steps.add(step(started, feeder.lines + " lines counted"));

            // Every input line's offset is committed: the tool shows the input topic's lag 0.
            awaitInputLagZero(app, input);
        } finally {
            feeder.stop();
            for (Instance instance : instances) {
                instance.close();
            }
        }
        Map<String, Long> finalCounts = latestCounts(output, null, Duration.ZERO);
        List<String> problems = new ArrayList<>();
        for (Instance instance : List.copyOf(Instance.ALL)) {
            problems.addAll(instance.problems());
        }
        System.out.println("Streams group word count, " + feeder.lines + " lines: " + String.join("; ", steps)
                + "; stream threads replaced or failed: " + problems);
        assertEquals(expected, finalCounts, "final counts read_committed after close");

        if (KAFKA_BOOTSTRAP.isEmpty()) {
            // Kafka Streams 4.4 speaks StreamsGroupHeartbeat v1 to a broker that offers it.
            assertEquals(Set.of("1"), heartbeatsSent.keySet(),
                    "StreamsGroupHeartbeat requests by version: " + heartbeatsSent);
        }

        // The group is Empty now; the tool deletes it and its internal topics.
        KafkaTool.Result deleted = KafkaTool.run(STREAMS_GROUP_COMMAND, List.of("--bootstrap-server", bootstrap(),
                "--delete", "--group", app, "--delete-all-internal-topics")).assertSuccess();
        assertTrue(deleted.stdout().contains("Deletion of requested streams groups ('" + app + "') was successful."),
                deleted.describe());
        assertTrue(deleted.stdout().contains("Deletion of associated internal topics of the streams groups ('" + app
                + "') was successful."), deleted.describe());
        try (Admin admin = Admin.create(clientProps())) {
            Set<String> groups = admin.listGroups(ListGroupsOptions.forStreamsGroups()).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).stream().map(GroupListing::groupId)
                    .collect(Collectors.toSet());
            assertFalse(groups.contains(app), "the group after --delete: " + groups);
            Set<String> topics = admin.listTopics().names().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(Set.of(), topics.stream().filter(t -> t.startsWith(app + "-")).collect(Collectors.toSet()),
                    "internal topics after --delete-all-internal-topics");
        }
    }

    @Test
    void heartbeat_and_describe_version_0_with_kafkas_request_classes() throws Exception {
        String group = "sg-v0";
        String source = "sg-v0-source";
        try (Admin admin = Admin.create(clientProps())) {
            admin.createTopics(List.of(new NewTopic(source, 2, (short) 1))).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            // The Admin finds the group's coordinator first, as every client does before its
            // first heartbeat (Kafka creates __consumer_offsets then), and the group does not
            // exist yet.
            ExecutionException unknown = assertThrows(ExecutionException.class, () -> admin
                    .describeStreamsGroups(List.of(group)).all().get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS));
            assertInstanceOf(GroupIdNotFoundException.class, unknown.getCause());
        }
        Map<String, Long> heartbeatsBefore = requestsByVersion("StreamsGroupHeartbeat");
        Map<String, Long> describesBefore = requestsByVersion("StreamsGroupDescribe");
        String memberId = UUID.randomUUID().toString();
        String[] host = bootstrap().split(":");
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(host[0], Integer.parseInt(host[1])), 5_000);
            socket.setSoTimeout(30_000);
            Raw raw = new Raw(socket);
            StreamsGroupHeartbeatRequestData join = new StreamsGroupHeartbeatRequestData()
                    .setGroupId(group)
                    .setMemberId(memberId)
                    .setMemberEpoch(0)
                    .setEndpointInformationEpoch(0)
                    .setRebalanceTimeoutMs(30_000)
                    .setProcessId(UUID.randomUUID().toString())
                    .setActiveTasks(List.of())
                    .setStandbyTasks(List.of())
                    .setWarmupTasks(List.of())
                    .setTopology(new StreamsGroupHeartbeatRequestData.Topology()
                            .setEpoch(0)
                            .setSubtopologies(List.of(new StreamsGroupHeartbeatRequestData.Subtopology()
                                    .setSubtopologyId("0")
                                    .setSourceTopics(List.of(source)))));
            // A single broker is every group's coordinator, once it has loaded the group's
            // __consumer_offsets partition (just created, or after a restart).
            StreamsGroupHeartbeatResponseData joined = raw.heartbeat(join);
            long loading = System.nanoTime() + WAIT.toNanos();
            while (COORDINATOR_NOT_READY.contains(Errors.forCode(joined.errorCode())) && System.nanoTime() < loading) {
                Thread.sleep(200);
                joined = raw.heartbeat(join);
            }
            assertEquals(Errors.NONE.code(), joined.errorCode(), joined.toString());
            assertTrue(joined.memberEpoch() >= 1, joined.toString());
            assertTrue(joined.heartbeatIntervalMs() > 0, joined.toString());
            // Whatever the group's rebalance delay, both tasks come within a few heartbeats.
            int epoch = joined.memberEpoch();
            List<Integer> active = joined.activeTasks() == null ? null : partitionsOf(joined.activeTasks());
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (active == null || active.size() < 2) {
                assertTrue(System.nanoTime() < deadline, "no assignment of both tasks within " + WAIT);
                Thread.sleep(joined.heartbeatIntervalMs());
                StreamsGroupHeartbeatResponseData beat = raw.heartbeat(new StreamsGroupHeartbeatRequestData()
                        .setGroupId(group)
                        .setMemberId(memberId)
                        .setMemberEpoch(epoch)
                        .setEndpointInformationEpoch(0)
                        .setActiveTasks(active == null ? List.of() : List.of(new StreamsGroupHeartbeatRequestData
                                .TaskIds().setSubtopologyId("0").setPartitions(active)))
                        .setStandbyTasks(List.of())
                        .setWarmupTasks(List.of()));
                assertEquals(Errors.NONE.code(), beat.errorCode(), beat.toString());
                epoch = beat.memberEpoch();
                if (beat.activeTasks() != null) {
                    active = partitionsOf(beat.activeTasks());
                }
            }
            assertEquals(List.of(0, 1), active);

            StreamsGroupDescribeResponseData described = raw.describe(group);
            assertEquals(1, described.groups().size(), described.toString());
            StreamsGroupDescribeResponseData.DescribedGroup g = described.groups().get(0);
            assertEquals(Errors.NONE.code(), g.errorCode(), g.toString());
            assertEquals("Stable", g.groupState(), g.toString());
            assertEquals(1, g.members().size(), g.toString());
            assertEquals(memberId, g.members().get(0).memberId());
            assertEquals(List.of(source), g.topology().subtopologies().get(0).sourceTopics());

            // Leaving: epoch -1 answered with -1, and the group is Empty.
            StreamsGroupHeartbeatResponseData left = raw.heartbeat(new StreamsGroupHeartbeatRequestData()
                    .setGroupId(group)
                    .setMemberId(memberId)
                    .setMemberEpoch(-1)
                    .setEndpointInformationEpoch(0));
            assertEquals(Errors.NONE.code(), left.errorCode(), left.toString());
            assertEquals(-1, left.memberEpoch());
            assertEquals("Empty", raw.describe(group).groups().get(0).groupState());
        }
        if (KAFKA_BOOTSTRAP.isEmpty()) {
            assertEquals(Set.of("0"), delta(heartbeatsBefore, requestsByVersion("StreamsGroupHeartbeat")).keySet());
            assertEquals(Set.of("0"), delta(describesBefore, requestsByVersion("StreamsGroupDescribe")).keySet());
        }
    }

    private static final Set<Errors> COORDINATOR_NOT_READY =
            Set.of(Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR);

    /** Requests written and responses read by kafka-clients' own classes, at version 0. */
    private static final class Raw {
        private final DataOutputStream out;
        private final DataInputStream in;
        private int correlationId;

        Raw(Socket socket) throws IOException {
            out = new DataOutputStream(socket.getOutputStream());
            in = new DataInputStream(socket.getInputStream());
        }

        StreamsGroupHeartbeatResponseData heartbeat(StreamsGroupHeartbeatRequestData data) throws IOException {
            return ((StreamsGroupHeartbeatResponse) send(ApiKeys.STREAMS_GROUP_HEARTBEAT,
                    new StreamsGroupHeartbeatRequest.Builder(data).build((short) 0))).data();
        }

        StreamsGroupDescribeResponseData describe(String group) throws IOException {
            return ((StreamsGroupDescribeResponse) send(ApiKeys.STREAMS_GROUP_DESCRIBE,
                    new StreamsGroupDescribeRequest.Builder(new StreamsGroupDescribeRequestData()
                            .setGroupIds(List.of(group))).build((short) 0))).data();
        }

        private AbstractResponse send(ApiKeys api, AbstractRequest request) throws IOException {
            RequestHeader header = new RequestHeader(api, (short) 0, "sg-v0", ++correlationId);
            ByteBuffer bytes = request.serializeWithHeader(header);
            out.writeInt(bytes.remaining());
            out.write(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining());
            out.flush();
            byte[] response = new byte[in.readInt()];
            in.readFully(response);
            return AbstractResponse.parseResponse(ByteBuffer.wrap(response), header);
        }
    }

    private static List<Integer> partitionsOf(List<StreamsGroupHeartbeatResponseData.TaskIds> tasks) {
        return tasks.stream().flatMap(t -> t.partitions().stream()).sorted().toList();
    }

    /** One Kafka Streams instance of the word count, with its own state directory (its own process id). */
    private static final class Instance implements AutoCloseable {
        static final List<Instance> ALL = Collections.synchronizedList(new ArrayList<>());

        final int index;
        final KafkaStreams streams;
        final Path stateDir;
        final List<String> transitions = Collections.synchronizedList(new ArrayList<>());
        final List<Throwable> uncaught = Collections.synchronizedList(new ArrayList<>());
        boolean closed;

        private Instance(int index, KafkaStreams streams, Path stateDir) {
            this.index = index;
            this.streams = streams;
            this.stateDir = stateDir;
        }

        static Instance start(String app, String input, String output, int index) throws IOException {
            Path stateDir = Files.createTempDirectory("streams-group-" + index + "-");
            Properties props = WordCount.exactlyOnce(clientProps(), app, stateDir);
            props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
            props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, THREADS_PER_INSTANCE);
            props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            props.put(StreamsConfig.CLIENT_ID_CONFIG, app + "-instance-" + index);
            Instance instance = new Instance(index, new KafkaStreams(WordCount.topology(input, output), props), stateDir);
            instance.streams.setStateListener((now, previous) -> instance.transitions.add(previous + "->" + now));
            // A stream thread that dies is replaced, as a production application would do;
            // the counts must stay exact either way, and the test reports it.
            instance.streams.setUncaughtExceptionHandler(e -> {
                instance.uncaught.add(e);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
            });
            ALL.add(instance);
            instance.streams.start();
            return instance;
        }

        void awaitRunning() throws InterruptedException {
            WordCount.awaitRunning(streams, transitions, WAIT);
        }

        List<String> problems() {
            List<String> problems = new ArrayList<>();
            uncaught.forEach(e -> problems.add("instance " + index + ": " + e));
            if (transitions.stream().anyMatch(t -> t.endsWith("->ERROR"))) {
                problems.add("instance " + index + " went to ERROR: " + transitions);
            }
            return problems;
        }

        @Override
        public void close() throws IOException {
            if (closed) {
                return;
            }
            closed = true;
            streams.close(CLIENT_TIMEOUT);
            OspreyBroker.deleteRecursively(stateDir);
        }
    }

    /**
     * Waits until the group is Stable with a member per stream thread of the running
     * instances, every member at the group's target assignment, each task active on exactly
     * one member, every instance with an active task, and each stateful task with a standby
     * on another instance than its active one (stateless tasks have none, as Kafka's sticky
     * assignor does). Returns the tasks, "subtopology:partition".
     */
    private static Set<String> awaitAssignment(Admin admin, String app, List<Instance> instances, List<String> steps,
            long started) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        String last = "";
        while (true) {
            StreamsGroupDescription d = admin.describeStreamsGroups(List.of(app)).all()
                    .get(CLIENT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(app);
            String problem = assignmentProblem(d, instances.size());
            if (problem == null) {
                steps.add(step(started, "group epoch " + d.groupEpoch() + ": " + instances.size() + " instances, "
                        + d.members().size() + " members, every task active once, standbys on other instances"));
                return allTasks(d);
            }
            last = problem + " in " + d;
            if (System.nanoTime() > deadline) {
                fail("the group did not settle within " + WAIT + ": " + last);
            }
            for (Instance instance : instances) {
                assertTrue(instance.streams.state().isRunningOrRebalancing(),
                        () -> "instance " + instance.index + " is " + instance.streams.state() + " after "
                                + instance.transitions + "; " + instance.uncaught);
            }
            Thread.sleep(200);
        }
    }

    /** Why {@code d} is not yet the settled assignment of {@code instances} instances, or null. */
    private static String assignmentProblem(StreamsGroupDescription d, int instances) {
        if (d.groupState() != GroupState.STABLE) {
            return "state " + d.groupState();
        }
        if (d.members().size() != instances * THREADS_PER_INSTANCE) {
            return d.members().size() + " members";
        }
        Set<String> processes = d.members().stream().map(StreamsGroupMemberDescription::processId)
                .collect(Collectors.toSet());
        if (processes.size() != instances) {
            return processes.size() + " processes";
        }
        Map<String, String> activeOn = new HashMap<>();
        Map<String, List<String>> standbysOn = new HashMap<>();
        Set<String> processesWithActive = new HashSet<>();
        for (StreamsGroupMemberDescription m : d.members()) {
            if (!m.assignment().equals(m.targetAssignment()) || m.memberEpoch() != d.targetAssignmentEpoch()) {
                return "member " + m.memberId() + " not reconciled";
            }
            for (String task : tasks(m.assignment().activeTasks())) {
                if (activeOn.put(task, m.processId()) != null) {
                    return "task " + task + " active twice";
                }
                processesWithActive.add(m.processId());
            }
            for (String task : tasks(m.assignment().standbyTasks())) {
                standbysOn.computeIfAbsent(task, t -> new ArrayList<>()).add(m.processId());
            }
        }
        Set<String> all = allTasks(d);
        if (!activeOn.keySet().equals(all)) {
            return "active tasks " + new TreeSet<>(activeOn.keySet()) + " of " + all;
        }
        if (!processesWithActive.equals(processes)) {
            return "an instance without an active task";
        }
        Set<String> stateful = statefulTasks(d);
        for (String task : all) {
            List<String> standbys = standbysOn.getOrDefault(task, List.of());
            int expected = stateful.contains(task) && instances > 1 ? 1 : 0;
            if (standbys.size() != expected) {
                return "task " + task + " has " + standbys.size() + " standbys";
            }
            if (standbys.contains(activeOn.get(task))) {
                return "task " + task + " has its standby on its active instance";
            }
        }
        return null;
    }

    private static Set<String> allTasks(StreamsGroupDescription d) {
        Set<String> tasks = new TreeSet<>();
        for (StreamsGroupSubtopologyDescription s : d.subtopologies()) {
            IntStream.range(0, PARTITIONS).forEach(p -> tasks.add(s.subtopologyId() + ":" + p));
        }
        return tasks;
    }

    private static Set<String> statefulTasks(StreamsGroupDescription d) {
        Set<String> tasks = new TreeSet<>();
        for (StreamsGroupSubtopologyDescription s : d.subtopologies()) {
            if (!s.stateChangelogTopics().isEmpty()) {
                IntStream.range(0, PARTITIONS).forEach(p -> tasks.add(s.subtopologyId() + ":" + p));
            }
        }
        return tasks;
    }

    private static List<String> tasks(List<StreamsGroupMemberAssignment.TaskIds> ids) {
        List<String> tasks = new ArrayList<>();
        for (StreamsGroupMemberAssignment.TaskIds t : ids) {
            t.partitions().forEach(p -> tasks.add(t.subtopologyId() + ":" + p));
        }
        return tasks;
    }

    /** {@code kafka-streams-groups.sh --list}, {@code --describe --state} and {@code --describe --members}. */
    private static void describeWithTheTool(String app, int members) throws Exception {
        KafkaTool.Result listed = KafkaTool.run(STREAMS_GROUP_COMMAND,
                List.of("--bootstrap-server", bootstrap(), "--list", "--state")).assertSuccess();
        assertTrue(listed.stdoutLines().stream().anyMatch(l -> l.trim().split("\\s+").length == 2
                && l.trim().startsWith(app + " ") && l.trim().endsWith(" Stable")), listed.describe());

        KafkaTool.Result state = KafkaTool.run(STREAMS_GROUP_COMMAND,
                List.of("--bootstrap-server", bootstrap(), "--describe", "--group", app, "--state")).assertSuccess();
        // GROUP  COORDINATOR (ID)  STATE  #MEMBERS
        List<String> row = rowOf(state, app);
        assertEquals(List.of("Stable", String.valueOf(members)), row.subList(row.size() - 2, row.size()),
                state.describe());

        KafkaTool.Result described = KafkaTool.run(STREAMS_GROUP_COMMAND,
                List.of("--bootstrap-server", bootstrap(), "--describe", "--group", app, "--members")).assertSuccess();
        // GROUP  MEMBER  PROCESS  CLIENT-ID  ASSIGNMENTS ("ACTIVE: 0:[0,1]; STANDBY: 1:[2]; ")
        List<List<String>> rows = described.stdoutLines().stream().map(l -> List.of(l.trim().split("\\s+")))
                .filter(r -> r.get(0).equals(app)).toList();
        assertEquals(members, rows.size(), described.describe());
        assertEquals(members / THREADS_PER_INSTANCE, rows.stream().map(r -> r.get(2)).distinct().count(),
                described.describe());
        assertTrue(rows.stream().allMatch(r -> r.get(3).startsWith(app + "-instance-")), described.describe());
        Pattern active = Pattern.compile("ACTIVE: ((\\d+:\\[[\\d,]+\\]; )+)");
        int activeTasks = 0;
        for (String line : described.stdoutLines()) {
            Matcher m = active.matcher(line);
            if (line.trim().startsWith(app + " ") && m.find()) {
                Matcher ids = Pattern.compile("\\d+:\\[([\\d,]+)\\]").matcher(m.group(1));
                while (ids.find()) {
                    activeTasks += ids.group(1).split(",").length;
                }
            }
        }
        assertEquals(2 * PARTITIONS, activeTasks, described.describe());
    }

    /** The tool's row for {@code group}, split on blanks. */
    private static List<String> rowOf(KafkaTool.Result result, String group) {
        return result.stdoutLines().stream().map(l -> List.of(l.trim().split("\\s+")))
                .filter(r -> r.get(0).equals(group)).findFirst()
                .orElseThrow(() -> new AssertionError("no row of " + group + "\n" + result.describe()));
    }

    /** {@code kafka-streams-groups.sh --describe} (offsets) until the input topic's partitions show lag 0. */
    private static void awaitInputLagZero(String app, String input) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            KafkaTool.Result offsets = KafkaTool.run(STREAMS_GROUP_COMMAND,
                    List.of("--bootstrap-server", bootstrap(), "--describe", "--group", app)).assertSuccess();
            Predicate<String> header = l -> l.trim().startsWith("GROUP ");
            Map<Integer, String> lags = new TreeMap<>();
            for (Map<String, String> row : offsets.rows(header)) {
                assertEquals(app, row.get("GROUP"), offsets.describe());
                if (row.get("TOPIC").equals(input)) {
                    lags.put(Integer.parseInt(row.get("PARTITION")), row.get("OFFSET-LAG"));
                }
            }
            Map<Integer, String> zero = new TreeMap<>();
            IntStream.range(0, PARTITIONS).forEach(p -> zero.put(p, "0"));
            if (lags.equals(zero)) {
                return;
            }
            if (System.nanoTime() > deadline) {
                fail("the input topic's lags are " + lags + " after " + WAIT + "\n" + offsets.describe());
            }
            Thread.sleep(500);
        }
    }

    private static String topicConfig(Map<ConfigResource, Config> configs, String topic, String key) {
        return configs.get(new ConfigResource(ConfigResource.Type.TOPIC, topic)).get(key).value();
    }

    /** Produces batches of lines until stopped; {@code expected} counts the words of acknowledged batches. */
    private static final class Feeder implements Runnable {
        final String input;
        final Map<String, Long> expected = new TreeMap<>();
        final AtomicBoolean stopped = new AtomicBoolean();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        volatile int lines;

        Feeder(String input) {
            this.input = input;
        }

        @Override
        public void run() {
            Random random = new Random(19);
            Properties props = clientProps();
            props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
            try (KafkaProducer<String, String> producer =
                    new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
                while (!stopped.get()) {
                    Map<String, Long> batch = new TreeMap<>();
                    List<Future<RecordMetadata>> acks = new ArrayList<>();
                    for (int i = 0; i < LINES_PER_BATCH; i++) {
                        String line = WordCount.line(random, MAX_WORDS_PER_LINE, VOCABULARY, batch);
                        acks.add(producer.send(new ProducerRecord<>(input, "line-" + (lines + i), line)));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> ack : acks) {
                        ack.get(); // throws if a send failed: its words' fate would be unknown
                    }
                    synchronized (this) {
                        batch.forEach((word, n) -> expected.merge(word, n, Long::sum));
                        lines += LINES_PER_BATCH;
                        notifyAll();
                    }
                    Thread.sleep(100);
                }
            } catch (Throwable e) {
                failure.set(e);
                synchronized (this) {
                    notifyAll();
                }
            }
        }

        /** Waits until {@code more} lines were produced after now. */
        synchronized void awaitMoreLines(int more) throws InterruptedException {
            int target = lines + more;
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (lines < target && failure.get() == null) {
                long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (left <= 0) {
                    fail("the feeder did not produce " + more + " lines within " + WAIT);
                }
                wait(left);
            }
            if (failure.get() != null) {
                throw new AssertionError("producing the input failed", failure.get());
            }
        }

        void stop() {
            stopped.set(true);
        }
    }

    private static Map<String, Long> latestCounts(String output, Map<String, Long> expected, Duration timeout) {
        return WordCount.latestCounts(clientProps(), output, PARTITIONS, expected, timeout, WAIT);
    }

    private static void restartBroker() throws Exception {
        if (KAFKA_BOOTSTRAP.isEmpty()) {
            BROKER.kill9AndRestart();
            return;
        }
        if (KAFKA_RESTART.isEmpty()) {
            fail("-Dcompat.kafka.restart must name the command that restarts the Kafka node");
        }
        Process p = new ProcessBuilder("sh", "-c", KAFKA_RESTART).inheritIO().start();
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "the restart command did not finish");
        assertEquals(0, p.exitValue(), "the restart command's exit code");
    }

    private static String bootstrap() {
        return KAFKA_BOOTSTRAP.isEmpty() ? BROKER.bootstrapServers() : KAFKA_BOOTSTRAP;
    }

    private static Properties clientProps() {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        return props;
    }

    private static String step(long started, String what) {
        return String.format("%.1f s %s", (System.nanoTime() - started) / 1e9, what);
    }

    /** The broker's requests of {@code api} by version (osprey only: Kafka's are not read). */
    private static Map<String, Long> requestsByVersion(String api) {
        return KAFKA_BOOTSTRAP.isEmpty() ? BROKER.requestsByVersion(api) : Map.of();
    }

    private static Map<String, Long> delta(Map<String, Long> before, Map<String, Long> after) {
        Map<String, Long> sent = new HashMap<>();
        after.forEach((version, count) -> {
            long d = count - before.getOrDefault(version, 0L);
            if (d > 0) {
                sent.put(version, d);
            }
        });
        return sent;
    }
}
