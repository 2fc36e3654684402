//! The families the scrape renders itself rather than through the metrics crate, whose
//! counters are integers: Prometheus' standard process metrics (client_golang's names,
//! read from Linux's /proc as it reads them), the build info, and the async runtime's
//! workers and their busy time. CPU and busy seconds are counters with fractions, which
//! an integer counter would round to whole seconds.

use std::fmt::Write;
use std::time::Duration;

/// The process metrics: what `/proc/self` says at one scrape.
#[derive(Debug, Clone, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_memory_bytes: u64,
    virtual_memory_bytes: u64,
    open_fds: u64,
    /// The soft limit on open files; `None`: unlimited.
    max_fds: Option<u64>,
    start_time_seconds: f64,
}

/// What the async runtime says of its worker threads.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RuntimeStats {
    workers: usize,
    busy: Duration,
    global_queue_depth: usize,
}

/// Appends the process, build and runtime families to a scrape. Reads /proc: call it off
/// the async workers. A process whose /proc cannot be read (not Linux) shows none of the
/// process metrics, rather than made-up ones.
pub(super) fn render(out: &mut String, runtime: &tokio::runtime::RuntimeMetrics) {
    if let Ok(stats) = read_process_stats() {
        render_process(out, &stats);
    }
    render_build_info(out, env!("CARGO_PKG_VERSION"));
    render_runtime(out, &runtime_stats(runtime));
}

fn runtime_stats(runtime: &tokio::runtime::RuntimeMetrics) -> RuntimeStats {
    let workers = runtime.num_workers();
    let busy = (0..workers).map(|w| runtime.worker_total_busy_duration(w)).sum();
    RuntimeStats { workers, busy, global_queue_depth: runtime.global_queue_depth() }
}

fn read_process_stats() -> std::io::Result<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let boot_time_seconds = boot_time_seconds(&std::fs::read_to_string("/proc/stat")?)?;
    let ticks_per_second = rustix::param::clock_ticks_per_second() as f64;
    let page_bytes = rustix::param::page_size() as u64;
    let open_fds = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let fields = StatFields::parse(&stat)?;
    Ok(ProcessStats {
        cpu_seconds: (fields.utime_ticks + fields.stime_ticks) as f64 / ticks_per_second,
        resident_memory_bytes: fields.rss_pages * page_bytes,
        virtual_memory_bytes: fields.vsize_bytes,
        open_fds,
        max_fds,
        start_time_seconds: boot_time_seconds as f64 + fields.start_time_ticks as f64 / ticks_per_second,
    })
}

/// The fields of `/proc/self/stat` (proc(5)) the process metrics use.
#[derive(Debug, PartialEq)]
struct StatFields {
    utime_ticks: u64,
    stime_ticks: u64,
    start_time_ticks: u64,
    vsize_bytes: u64,
    rss_pages: u64,
}

impl StatFields {
    fn parse(stat: &str) -> std::io::Result<StatFields> {
        // The command name (field 2) is in parentheses and may hold spaces and ')': the
        // fields are counted from after the last ')', where field 3 (state) starts.
        let after_name = stat.rfind(')').map(|at| &stat[at + 1..]).ok_or_else(|| malformed(stat))?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |number: usize| -> std::io::Result<u64> {
            fields.get(number - 3).and_then(|f| f.parse().ok()).ok_or_else(|| malformed(stat))
        };
        Ok(StatFields {
            utime_ticks: field(14)?,
            stime_ticks: field(15)?,
            start_time_ticks: field(22)?,
            vsize_bytes: field(23)?,
            rss_pages: field(24)?,
        })
    }
}

/// `btime` of `/proc/stat`: when the system booted, in seconds since the epoch.
fn boot_time_seconds(proc_stat: &str) -> std::io::Result<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| malformed("/proc/stat without btime"))
}

fn malformed(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unexpected /proc contents: {what:.200}"))
}

fn render_process(out: &mut String, s: &ProcessStats) {
    family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    sample(out, "process_cpu_seconds_total", "", s.cpu_seconds);
    family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    sample(out, "process_resident_memory_bytes", "", s.resident_memory_bytes as f64);
    family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    sample(out, "process_virtual_memory_bytes", "", s.virtual_memory_bytes as f64);
    family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
    sample(out, "process_open_fds", "", s.open_fds as f64);
    family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
    sample(out, "process_max_fds", "", s.max_fds.map_or(f64::INFINITY, |n| n as f64));
    family(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    sample(out, "process_start_time_seconds", "", s.start_time_seconds);
}

fn render_build_info(out: &mut String, version: &str) {
    family(out, "osprey_build_info", "gauge", "Always 1; the version of the running osprey in its label.");
    sample(out, "osprey_build_info", &format!("{{version=\"{version}\"}}"), 1.0);
}

fn render_runtime(out: &mut String, r: &RuntimeStats) {
    family(out, "osprey_runtime_workers", "gauge", "Worker threads of the async runtime.");
    sample(out, "osprey_runtime_workers", "", r.workers as f64);
    family(
        out,
        "osprey_runtime_worker_busy_seconds_total",
        "counter",
        "Time the async runtime's workers spent running tasks, summed over the workers.",
    );
    sample(out, "osprey_runtime_worker_busy_seconds_total", "", r.busy.as_secs_f64());
    family(
        out,
        "osprey_runtime_global_queue_depth",
        "gauge",
        "Tasks ready to run waiting in the async runtime's shared queue for a worker.",
    );
    sample(out, "osprey_runtime_global_queue_depth", "", r.global_queue_depth as f64);
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    if value == f64::INFINITY {
        let _ = writeln!(out, "{name}{labels} +Inf");
    } else {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_after_the_command_name() {
        // A command name with spaces and a ')' of its own, as proc(5) allows.
        let stat = "4242 (osp rey) x) S 1 4242 4242 0 -1 4194560 1203 0 0 0 250 75 0 0 20 0 9 0 \
                    123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 4096 17647 0 0 0 17 1 0 0 0 0 0";
        let fields = StatFields::parse(stat).unwrap();
        assert_eq!(
            fields,
            StatFields {
                utime_ticks: 250,
                stime_ticks: 75,
                start_time_ticks: 123456,
                vsize_bytes: 987654321,
                rss_pages: 2048
            }
        );
    }

    #[test]
    fn a_truncated_stat_line_is_an_error_not_a_panic() {
        assert!(StatFields::parse("4242 (osprey) S 1 2 3").is_err());
        assert!(StatFields::parse("no parenthesis").is_err());
        assert!(boot_time_seconds("cpu 1 2 3\n").is_err());
        assert_eq!(boot_time_seconds("cpu 1 2 3\nbtime 1700000000\n").unwrap(), 1_700_000_000);
    }

    #[test]
    fn this_process_reads_as_started_and_holding_memory_and_files() {
        let stats = read_process_stats().unwrap();
        assert!(stats.resident_memory_bytes > 0 && stats.virtual_memory_bytes >= stats.resident_memory_bytes);
        assert!(stats.open_fds >= 3, "stdin, stdout, stderr at least: {stats:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(stats.start_time_seconds <= now + 1.0 && stats.start_time_seconds > now - 86_400.0, "{stats:?}");
    }

    #[test]
    fn the_families_render_with_help_type_and_fractional_counters() {
        let mut out = String::new();
        let stats = ProcessStats {
            cpu_seconds: 1.25,
            resident_memory_bytes: 10,
            virtual_memory_bytes: 20,
            open_fds: 3,
            max_fds: None,
            start_time_seconds: 1.5,
        };
        render_process(&mut out, &stats);
        render_build_info(&mut out, "1.2.3");
        render_runtime(
            &mut out,
            &RuntimeStats { workers: 2, busy: Duration::from_millis(1500), global_queue_depth: 0 },
        );
        assert!(out.contains("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.25\n"), "{out}");
        assert!(out.contains("process_max_fds +Inf\n"), "{out}");
        assert!(out.contains("osprey_build_info{version=\"1.2.3\"} 1\n"), "{out}");
        assert!(out.contains("osprey_runtime_worker_busy_seconds_total 1.5\n"), "{out}");
    }
}
