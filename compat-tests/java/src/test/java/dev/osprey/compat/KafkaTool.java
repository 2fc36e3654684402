package dev.osprey.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.stream.IntStream;

/**
 * Runs one of Kafka's command-line tools as its own JVM on the test classpath, as
 * {@code bin/kafka-*.sh} would: the tools end with {@code System.exit} and keep static
 * state, so a separate process is both the faithful way and the safe one. Every run is
 * bounded by a timeout.
 */
final class KafkaTool {
    private static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(60);

    /** What one run left behind. */
    record Result(String tool, List<String> args, int exitCode, String stdout, String stderr) {
        List<String> stdoutLines() {
            return stdout.lines().toList();
        }

        /**
         * The table the tool printed: the first non-blank line {@code isHeader} accepts names
         * the columns, and every later non-blank line is one row. Columns are separated by
         * runs of spaces; a row with another number of columns fails the test.
         */
        List<Map<String, String>> rows(Predicate<String> isHeader) {
            List<String> lines = stdoutLines().stream().filter(l -> !l.isBlank()).toList();
            int header = IntStream.range(0, lines.size()).filter(i -> isHeader.test(lines.get(i))).findFirst().orElse(-1);
            assertTrue(header >= 0, () -> "no table header\n" + describe());
            String[] names = lines.get(header).trim().split("\\s+");
            List<Map<String, String>> rows = new ArrayList<>();
            for (String line : lines.subList(header + 1, lines.size())) {
                String[] values = line.trim().split("\\s+");
                assertEquals(names.length, values.length, () -> "columns of '" + line + "'\n" + describe());
                Map<String, String> row = new HashMap<>();
                for (int i = 0; i < names.length; i++) {
                    row.put(names[i], values[i]);
                }
                rows.add(row);
            }
            return rows;
        }

        /** Fails with everything the tool printed unless it exited 0. */
        Result assertSuccess() {
            assertEquals(0, exitCode, () -> describe());
            return this;
        }

        String describe() {
            return tool + " " + String.join(" ", args) + "\nexit " + exitCode
                    + "\n--- stdout ---\n" + stdout + "\n--- stderr ---\n" + stderr;
        }
    }

    private KafkaTool() {}

    /**
     * Starts {@code mainClass args} in the background, stdout and stderr to these files, for
     * a tool that runs alongside the test (TransactionalMessageCopier); the caller bounds it.
     */
    static Process start(String mainClass, List<String> args, Path stdout, Path stderr) throws IOException {
        return new ProcessBuilder(command(mainClass, args))
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                .redirectOutput(stdout.toFile())
                .redirectError(stderr.toFile())
                .start();
    }

    private static List<String> command(String mainClass, List<String> args) {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        // Short-lived JVMs on a 2-core machine: the C1 compiler alone and a small GC start fastest.
        command.add("-XX:TieredStopAtLevel=1");
        command.add("-XX:+UseSerialGC");
        command.add("-Xmx512m");
        command.add("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn");
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(mainClass);
        command.addAll(args);
        return command;
    }

    static Result run(String mainClass, List<String> args) throws IOException, InterruptedException {
        return run(mainClass, args, null, DEFAULT_TIMEOUT);
    }

    /** Runs {@code mainClass args}, with {@code stdin} (or nothing) as standard input. */
    static Result run(String mainClass, List<String> args, String stdin, Duration timeout)
            throws IOException, InterruptedException {
        Path dir = Files.createTempDirectory("kafka-tool-");
        Path out = dir.resolve("stdout");
        Path err = dir.resolve("stderr");
        Path in = dir.resolve("stdin");
        Files.writeString(in, stdin == null ? "" : stdin, StandardCharsets.UTF_8);

        Process process = new ProcessBuilder(command(mainClass, args))
                .redirectInput(in.toFile())
                .redirectOutput(out.toFile())
                .redirectError(err.toFile())
                .start();
        int exit;
        if (process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
            exit = process.exitValue();
        } else {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            exit = -1;
            Files.writeString(err, "\n(killed after " + timeout + ")", StandardCharsets.UTF_8,
                    java.nio.file.StandardOpenOption.APPEND);
        }
        Result result = new Result(mainClass.substring(mainClass.lastIndexOf('.') + 1), List.copyOf(args), exit,
                Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        for (File f : new File[] {out.toFile(), err.toFile(), in.toFile(), dir.toFile()}) {
            f.delete();
        }
        return result;
    }
}
