package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * Three combined osprey nodes ({@code process.roles=broker,controller}) for a test class:
 * {@code @RegisterExtension static final OspreyCluster CLUSTER = new OspreyCluster(Map.of(...));}.
 *
 * <p>Each node gets a config file as compat-tests/python/cluster.py writes one: its
 * node.id, the three voters in {@code controller.quorum.voters}, a PLAINTEXT and a
 * CONTROLLER listener and a metrics listener on free ports (kept across restarts), its
 * own log directory. The extension starts the nodes and waits until every controller is a
 * voter and every broker is listed; a test kills a node with {@link Node#kill9()}
 * (destroyForcibly, SIGKILL) and starts it again with {@link Node#start()}. After the
 * class every running node must stop on SIGTERM with exit code 0. The nodes' logs are
 * printed when a test fails.
 */
public final class OspreyCluster implements BeforeAllCallback, AfterAllCallback, TestWatcher {
    /** How long the cluster may take for anything it does (forming, an election, a catch-up). */
    public static final Duration WAIT = Duration.ofSeconds(60);
    private static final Duration STOP_TIMEOUT = Duration.ofSeconds(40);
    private static final int LOG_TAIL_LINES = 80;
    private static final String VOTER = "this controller is a voter of the quorum";
    private static final Set<Integer> PORTS_HANDED_OUT = new HashSet<>();

    private final Map<String, String> extra;
    private final List<Node> nodes = new ArrayList<>();
    private Path workDir;

    /** Three nodes with these {@code key=value} settings on top of each node's own. */
    public OspreyCluster(Map<String, String> extra) {
        this.extra = new LinkedHashMap<>(extra);
    }

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        workDir = Files.createTempDirectory("osprey-cluster-");
        for (int id = 1; id <= 3; id++) {
            nodes.add(new Node(id, workDir));
        }
        String voters = nodes.stream().map(n -> n.id + "@127.0.0.1:" + n.controllerPort)
                .collect(Collectors.joining(","));
        for (Node n : nodes) {
            n.writeConfig(voters, extra);
        }
        for (Node n : nodes) {
            n.start();
        }
        waitFor("every controller a voter of the quorum", () -> nodes.stream().allMatch(n -> n.log().contains(VOTER)));
        awaitBrokers();
    }

    @Override
    public void afterAll(ExtensionContext context) throws Exception {
        List<String> failures = new ArrayList<>();
        for (Node n : nodes) {
            String outcome = n.stop();
            if (outcome != null) {
                failures.add(outcome);
            }
        }
        if (failures.isEmpty()) {
            OspreyBroker.deleteRecursively(workDir);
        } else {
            fail(String.join("\n\n", failures));
        }
    }

    @Override
    public void testFailed(ExtensionContext context, Throwable cause) {
        System.err.println("---- osprey cluster logs after " + context.getDisplayName() + " failed ----");
        System.err.println(logs(LOG_TAIL_LINES));
        System.err.println("---- end of osprey cluster logs ----");
    }

    public List<Node> nodes() {
        return nodes;
    }

    public Node node(int id) {
        return nodes.stream().filter(n -> n.id == id).findFirst().orElseThrow();
    }

    /** Every node, running or not, as a client's bootstrap list would name them. */
    public String bootstrapServers() {
        return nodes.stream().map(Node::bootstrap).collect(Collectors.joining(","));
    }

    /** Client properties with only the bootstrap list set. */
    public Properties clientProps() {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
        return props;
    }

    /** An admin client whose calls fail rather than hang while nodes come and go. */
    public Admin admin() {
        Properties props = clientProps();
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        return Admin.create(props);
    }

    /** Until each running node, asked alone, lists every running node as a broker. */
    public void awaitBrokers() {
        Set<Integer> running = nodes.stream().filter(Node::running).map(n -> n.id).collect(Collectors.toSet());
        for (Node n : nodes) {
            if (!n.running()) {
                continue;
            }
            Properties props = new Properties();
            props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, n.bootstrap());
            props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
            props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
            try (Admin admin = Admin.create(props)) {
                waitFor(n + " lists brokers " + running, () -> {
                    try {
                        Set<Integer> listed = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).stream()
                                .map(org.apache.kafka.common.Node::id).collect(Collectors.toSet());
                        return listed.equals(running);
                    } catch (ExecutionException | TimeoutException e) {
                        return false;
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException(e);
                    }
                });
            }
        }
    }

    /**
     * Until every partition of every topic, the internal ones included, has a leader and
     * all its replicas in sync: after a restart, before the next node may be killed.
     */
    public void awaitAllInSync(Admin admin) {
        waitFor("every partition of every topic with all its replicas in sync", () -> {
            try {
                Set<String> topics = admin.listTopics(new ListTopicsOptions().listInternal(true)).names()
                        .get(10, TimeUnit.SECONDS);
                Map<String, TopicDescription> described = admin.describeTopics(topics).allTopicNames()
                        .get(10, TimeUnit.SECONDS);
                return described.values().stream().flatMap(d -> d.partitions().stream())
                        .allMatch(OspreyCluster::fullyInSync);
            } catch (ExecutionException | TimeoutException e) {
                return false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        });
    }

    private static boolean fullyInSync(TopicPartitionInfo p) {
        return p.leader() != null && !p.leader().isEmpty() && p.isr().size() == p.replicas().size()
                && p.isr().stream().map(org.apache.kafka.common.Node::id).collect(Collectors.toSet())
                        .equals(p.replicas().stream().map(org.apache.kafka.common.Node::id).collect(Collectors.toSet()));
    }

    /** Polls {@code probe} every 200 ms until true; fails with every node's log after {@link #WAIT}. */
    public void waitFor(String what, Supplier<Boolean> probe) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (System.nanoTime() < deadline) {
            for (Node n : nodes) {
                if (n.process != null && !n.process.isAlive()) {
                    fail(n + " exited with " + n.process.exitValue() + " while waiting for: " + what + "\n"
                            + logs(LOG_TAIL_LINES));
                }
            }
            if (probe.get()) {
                return;
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
        fail("never within " + WAIT + ": " + what + "\n" + logs(LOG_TAIL_LINES));
    }

    public String logs(int lines) {
        return nodes.stream().map(n -> "--- " + n + " " + n.logFile + "\n" + n.logTail(lines))
                .collect(Collectors.joining("\n"));
    }

    private static int freePort() {
        synchronized (PORTS_HANDED_OUT) {
            while (true) {
                try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                    if (PORTS_HANDED_OUT.add(s.getLocalPort())) {
                        return s.getLocalPort();
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
        }
    }

    /** One osprey process; its ports, config and directory survive restarts. */
    public static final class Node {
        public final int id;
        private final int port = freePort();
        private final int controllerPort = freePort();
        private final int metricsPort = freePort();
        private final Path dataDir;
        private final Path config;
        private final Path logFile;
        private Process process;

        private Node(int id, Path workDir) {
            this.id = id;
            this.dataDir = workDir.resolve("node-" + id);
            this.config = workDir.resolve("node-" + id + ".properties");
            this.logFile = workDir.resolve("node-" + id + ".log");
        }

        @Override
        public String toString() {
            return "node " + id;
        }

        public String bootstrap() {
            return "127.0.0.1:" + port;
        }

        public boolean running() {
            return process != null && process.isAlive();
        }

        private void writeConfig(String voters, Map<String, String> extra) throws IOException {
            Map<String, String> keys = new LinkedHashMap<>();
            keys.put("process.roles", "broker,controller");
            keys.put("node.id", Integer.toString(id));
            keys.put("controller.quorum.voters", voters);
            keys.put("listeners", "PLAINTEXT://" + bootstrap() + ",CONTROLLER://127.0.0.1:" + controllerPort);
            keys.put("controller.listener.names", "CONTROLLER");
            keys.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
            keys.put("log.dirs", dataDir.toString());
            keys.put("metrics.listener", "127.0.0.1:" + metricsPort);
            keys.put("advertised.listeners", "PLAINTEXT://" + bootstrap());
            keys.put("inter.broker.listener.name", "PLAINTEXT");
            keys.putAll(extra);
            Files.writeString(config, keys.entrySet().stream().map(e -> e.getKey() + "=" + e.getValue() + "\n")
                    .collect(Collectors.joining()), StandardCharsets.UTF_8);
        }

        /** Starts the process (not waiting for anything): its log gets a "===== start" line. */
        public void start() throws IOException {
            if (running()) {
                throw new IllegalStateException(this + " already runs");
            }
            String bin = System.getProperty("osprey.bin");
            if (bin == null || bin.isBlank() || !Files.isExecutable(Path.of(bin))) {
                fail("system property osprey.bin must name the built osprey binary, got: " + bin);
            }
            Files.writeString(logFile, "===== start\n", StandardCharsets.UTF_8, java.nio.file.StandardOpenOption.CREATE,
                    java.nio.file.StandardOpenOption.APPEND);
            ProcessBuilder builder = new ProcessBuilder(bin, config.toString())
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
            builder.environment().put("NO_COLOR", "1");
            builder.environment().putIfAbsent("OSPREY_LOG", "info");
            process = builder.start();
        }

        /** SIGKILL (destroyForcibly): the process dies at once. */
        public void kill9() throws IOException, InterruptedException {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            process = null;
            Files.writeString(logFile, "===== killed with SIGKILL\n", StandardCharsets.UTF_8,
                    java.nio.file.StandardOpenOption.APPEND);
        }

        /** SIGTERM; null when it exited 0 in time (or was not running), else what went wrong. */
        private String stop() throws InterruptedException {
            if (process == null) {
                return null;
            }
            process.destroy();
            if (!process.waitFor(STOP_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                return this + " did not stop within " + STOP_TIMEOUT + " of SIGTERM:\n" + logTail(LOG_TAIL_LINES);
            }
            int exit = process.exitValue();
            process = null;
            return exit == 0 ? null : this + " exited with " + exit + " after SIGTERM:\n" + logTail(LOG_TAIL_LINES);
        }

        public String log() {
            return OspreyBroker.readLog(logFile);
        }

        public String logTail(int lines) {
            return OspreyBroker.lastLines(log(), lines);
        }
    }
}
