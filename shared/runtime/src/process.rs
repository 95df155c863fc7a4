//! The standard process metrics every Prometheus client exports (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, …), read from `/proc/self` when `/metrics` is
//! rendered. They keep their customary names, without the `ax_` prefix, so stock
//! dashboards and alerts work on AX processes as they do on any other. Elsewhere
//! than Linux they are simply absent.

use std::sync::Once;

pub const CPU_SECONDS: &str = "process_cpu_seconds_total";
pub const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
pub const VIRTUAL_MEMORY: &str = "process_virtual_memory_bytes";
pub const OPEN_FDS: &str = "process_open_fds";
pub const MAX_FDS: &str = "process_max_fds";
pub const START_TIME: &str = "process_start_time_seconds";
pub const THREADS: &str = "process_threads";

/// Linux reports CPU time in clock ticks of USER_HZ, which is 100 on every
/// mainstream architecture (the kernel ABI fixes it, whatever CONFIG_HZ is).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_SIZE: f64 = 4096.0;

fn describe() {
    use metrics::{describe_gauge, Unit};
    describe_gauge!(CPU_SECONDS, Unit::Seconds, "User and system CPU time of this process");
    describe_gauge!(RESIDENT_MEMORY, Unit::Bytes, "Resident memory of this process");
    describe_gauge!(VIRTUAL_MEMORY, Unit::Bytes, "Virtual memory of this process");
    describe_gauge!(OPEN_FDS, "Open file descriptors");
    describe_gauge!(MAX_FDS, "Limit on open file descriptors");
    describe_gauge!(START_TIME, Unit::Seconds, "Start time of this process since the Unix epoch");
    describe_gauge!(THREADS, "Threads of this process");
}

/// Sets the process gauges to their current values.
pub fn refresh() {
    static DESCRIBED: Once = Once::new();
    DESCRIBED.call_once(describe);
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    // The command name (field 2) may contain spaces; the fields after it are plain.
    let Some(after_name) = stat.rsplit_once(')').map(|(_, rest)| rest) else { return };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (state) of proc(5).
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        metrics::gauge!(CPU_SECONDS).set((utime + stime) / TICKS_PER_SECOND);
    }
    if let Some(threads) = field(20) {
        metrics::gauge!(THREADS).set(threads);
    }
    if let (Some(start_ticks), Some(boot)) = (field(22), boot_time()) {
        metrics::gauge!(START_TIME).set(boot + start_ticks / TICKS_PER_SECOND);
    }
    if let Some(vsize) = field(23) {
        metrics::gauge!(VIRTUAL_MEMORY).set(vsize);
    }
    if let Some(rss) = field(24) {
        metrics::gauge!(RESIDENT_MEMORY).set(rss * PAGE_SIZE);
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!(OPEN_FDS).set(entries.count() as f64);
    }
    if let Some(max) = max_open_files() {
        metrics::gauge!(MAX_FDS).set(max);
    }
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn max_open_files() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
