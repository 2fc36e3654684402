package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.kafka.clients.CommonClientConfigs;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * One osprey broker for a test class: {@code @RegisterExtension static final OspreyBroker
 * BROKER = new OspreyBroker();}.
 *
 * <p>It builds nothing: it runs the binary named by the system property {@code osprey.bin}
 * (java-tests.sh builds it first) with a fresh data directory, on port 0 so that parallel
 * runs never collide, and reads the bound port back from the "osprey is ready" line. After
 * the class it sends SIGTERM and fails unless the broker exits 0 in time, since an unclean
 * stop is a broker bug too. The broker's log is printed whenever a test fails.
 *
 * <p>After each test the broker must still answer ApiVersions: a client can finish happily
 * while the broker it talked to is wedged, and the test that wedged it is the one to blame.
 * A wedged broker is then killed and replaced by a fresh one, so that one broker bug fails
 * one test rather than every test after it.
 */
public final class OspreyBroker implements BeforeAllCallback, AfterAllCallback, AfterEachCallback, TestWatcher {
    private static final Duration READY_TIMEOUT = Duration.ofSeconds(30);
    /** Above the broker's own 30 s drain only if a request is stuck; normally it takes ms. */
    private static final Duration STOP_TIMEOUT = Duration.ofSeconds(40);
    private static final int LOG_TAIL_LINES = 200;
    private static final int LIVENESS_TIMEOUT_MS = 5_000;
    private static final Pattern ANSI = Pattern.compile("\u001B\\[[0-9;]*m");
    private static final Pattern READY = Pattern.compile("osprey is ready.*listener=([0-9.]+):(\\d+)");
    private static final Pattern NODE_ID = Pattern.compile("node_id=(-?\\d+)");

    /** Extra {@code key=value} broker settings, passed as {@code --override}. */
    private final List<String> overrides;
    private Path dataDir;
    private Path logFile;
    private Process process;
    private String host;
    private int port;
    private int nodeId;
    /** The Prometheus endpoint's port: picked free at the first start, kept across restarts. */
    private int metricsPort;
    /** Set when afterEach replaced a wedged broker: its log went into the failure message. */
    private boolean replaced;

    /** A broker with osprey's defaults. */
    public OspreyBroker() {
        this(List.of());
    }

    /** A broker with these {@code key=value} settings on top of the defaults. */
    public OspreyBroker(List<String> overrides) {
        this.overrides = List.copyOf(overrides);
    }

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        start();
    }

    @Override
    public void afterAll(ExtensionContext context) throws Exception {
        stop();
    }

    @Override
    public void afterEach(ExtensionContext context) throws Exception {
        try {
            apiVersions();
        } catch (UncheckedIOException e) {
            String log = logTail(LOG_TAIL_LINES);
            String stop = kill();
            start();
            replaced = true;
            fail("osprey stopped answering ApiVersions (" + e.getCause() + ") after " + context.getDisplayName()
                    + "; " + stop + "; a fresh broker serves the remaining tests. Its log:\n" + log);
        }
    }

    @Override
    public void testFailed(ExtensionContext context, Throwable cause) {
        if (replaced) {
            replaced = false; // the wedged broker's log is in the failure message already
            return;
        }
        System.err.println("---- osprey log (last " + LOG_TAIL_LINES + " lines) after "
                + context.getDisplayName() + " failed ----");
        System.err.println(logTail(LOG_TAIL_LINES));
        System.err.println("---- end of osprey log ----");
    }

    public String bootstrapServers() {
        return host + ":" + port;
    }

    public int port() {
        return port;
    }

    public int nodeId() {
        return nodeId;
    }

    public Path dataDir() {
        return dataDir;
    }

    /** Client properties with only the bootstrap address set. */
    public Properties clientProps() {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
        return props;
    }

    /** The whole broker log so far, colour codes removed. */
    public String log() {
        return readLog(logFile);
    }

    public String logTail(int lines) {
        return lastLines(log(), lines);
    }

    /** An osprey log file as text, colour codes removed (an OspreyCluster node's too). */
    static String readLog(Path logFile) {
        try {
            return ANSI.matcher(Files.readString(logFile, StandardCharsets.UTF_8)).replaceAll("");
        } catch (IOException e) {
            return "(cannot read " + logFile + ": " + e + ")";
        }
    }

    static String lastLines(String text, int lines) {
        List<String> all = text.lines().toList();
        return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
    }

    /**
     * Whether the broker advertises {@code apiKey} in ApiVersions. Tests of features the
     * broker does not serve yet (consumer groups) are skipped with this, so they start
     * running by themselves on the day the broker advertises the API.
     */
    public boolean advertises(short apiKey) {
        return apiVersions().containsKey(apiKey);
    }

    /** The broker's Prometheus metrics, as text. */
    public String metrics() {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + metricsPort + "/metrics"))
                .timeout(Duration.ofMillis(LIVENESS_TIMEOUT_MS))
                .build();
        try {
            return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString()).body();
        } catch (IOException e) {
            throw new UncheckedIOException("metrics of " + bootstrapServers(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** {@code osprey_requests_total} of {@code api} (its name, as "ApiVersions"), by version label. */
    public Map<String, Long> requestsByVersion(String api) {
        Pattern requests = Pattern.compile("^osprey_requests_total\\{(?=[^}]*api=\"" + api
                + "\")[^}]*version=\"(\\d+)\"[^}]*\\} (\\d+)$", Pattern.MULTILINE);
        Map<String, Long> counts = new HashMap<>();
        Matcher m = requests.matcher(metrics());
        while (m.find()) {
            counts.merge(m.group(1), Long.parseLong(m.group(2)), Long::sum);
        }
        return counts;
    }

    /** ApiVersions v0 over a raw socket: api key to {min, max}. */
    public Map<Short, short[]> apiVersions() {
        byte[] clientId = "osprey-compat".getBytes(StandardCharsets.UTF_8);
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(host, port), LIVENESS_TIMEOUT_MS);
            socket.setSoTimeout(LIVENESS_TIMEOUT_MS);
            DataOutputStream out = new DataOutputStream(socket.getOutputStream());
            out.writeInt(2 + 2 + 4 + 2 + clientId.length);
            out.writeShort(18); // ApiVersions
            out.writeShort(0);
            out.writeInt(1); // correlation id
            out.writeShort(clientId.length);
            out.write(clientId);
            out.flush();
            DataInputStream in = new DataInputStream(socket.getInputStream());
            int size = in.readInt();
            if (size < 10 || size > 1 << 20) {
                throw new IOException("ApiVersions response of implausible size " + size);
            }
            assertEquals(1, in.readInt(), "ApiVersions correlation id");
            assertEquals(0, in.readShort(), "ApiVersions error code");
            int count = in.readInt();
            Map<Short, short[]> versions = new HashMap<>();
            for (int i = 0; i < count; i++) {
                versions.put(in.readShort(), new short[] {in.readShort(), in.readShort()});
            }
            return versions;
        } catch (IOException e) {
            throw new UncheckedIOException("ApiVersions to " + bootstrapServers(), e);
        }
    }

    private void start() throws IOException, InterruptedException {
        dataDir = Files.createTempDirectory("osprey-compat-");
        logFile = dataDir.resolve("osprey.log");
        try (ServerSocket free = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            metricsPort = free.getLocalPort();
        }
        launch("PLAINTEXT://127.0.0.1:0");
    }

    /**
     * SIGKILLs the broker and starts it again on the same data directory and port, as an
     * operator would after a crash; returns once it is ready again. Clients keep their
     * bootstrap address.
     */
    public void kill9AndRestart() throws IOException, InterruptedException {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        launch("PLAINTEXT://" + host + ":" + port);
    }

    private void launch(String listener) throws IOException, InterruptedException {
        String bin = System.getProperty("osprey.bin");
        if (bin == null || bin.isBlank() || !Files.isExecutable(Path.of(bin))) {
            fail("system property osprey.bin must name the built osprey binary, got: " + bin);
        }
        Path logDir = dataDir.resolve("data");
        List<String> command = new ArrayList<>(List.of(bin,
                "--override", "listeners=" + listener,
                "--override", "log.dirs=" + logDir,
                "--override", "metrics.listener=127.0.0.1:" + metricsPort));
        for (String override : overrides) {
            command.add("--override");
            command.add(override);
        }
        // A restart appends to the log; only its own "ready" line counts.
        int logStart = Files.exists(logFile) ? log().length() : 0;
        ProcessBuilder builder = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        builder.environment().put("NO_COLOR", "1");
        builder.environment().putIfAbsent("OSPREY_LOG", "info");
        process = builder.start();
        long deadline = System.nanoTime() + READY_TIMEOUT.toNanos();
        while (System.nanoTime() < deadline) {
            String log = log();
            Matcher ready = READY.matcher(log.substring(Math.min(logStart, log.length())));
            if (ready.find()) {
                host = ready.group(1);
                port = Integer.parseInt(ready.group(2));
                Matcher node = NODE_ID.matcher(ready.group(0));
                nodeId = node.find() ? Integer.parseInt(node.group(1)) : 1;
                return;
            }
            if (!process.isAlive()) {
                fail("osprey exited with " + process.exitValue() + " before it was ready:\n" + log());
            }
            Thread.sleep(50);
        }
        process.destroyForcibly();
        fail("osprey did not log 'osprey is ready' within " + READY_TIMEOUT + ":\n" + log());
    }

    /** Stops a wedged broker: SIGTERM first (to report whether it still obeys), then SIGKILL. */
    private String kill() throws IOException, InterruptedException {
        String outcome;
        boolean alive = process.isAlive();
        process.destroy();
        if (!alive) {
            outcome = "it had already exited with " + process.exitValue();
        } else if (process.waitFor(5, TimeUnit.SECONDS)) {
            outcome = "it exited with " + process.exitValue() + " on SIGTERM";
        } else {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            outcome = "it ignored SIGTERM for 5 s and was killed";
        }
        process = null;
        deleteRecursively(dataDir);
        return outcome;
    }

    private void stop() throws IOException, InterruptedException {
        if (process == null) {
            return;
        }
        process.destroy(); // SIGTERM
        if (!process.waitFor(STOP_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            fail("osprey did not stop within " + STOP_TIMEOUT + " of SIGTERM:\n" + logTail(LOG_TAIL_LINES));
        }
        int exit = process.exitValue();
        if (exit != 0) {
            fail("osprey exited with " + exit + " after SIGTERM, expected 0:\n" + logTail(LOG_TAIL_LINES));
        }
        deleteRecursively(dataDir);
    }

    /** Removes {@code dir} and everything below it (a test's data or state directory). */
    static void deleteRecursively(Path dir) throws IOException {
        try (Stream<Path> paths = Files.walk(dir)) {
            for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
