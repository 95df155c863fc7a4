//! Processes: the `ax` services the scenarios start, killed with SIGKILL where a
//! scenario says so, and what `/proc` says about their memory and CPU.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

/// `target/release/ax`, next to this binary (both come from `cargo build --release`),
/// or `AX_BIN`.
pub fn ax_binary() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("AX_BIN") {
        return Ok(path.into());
    }
    let me = std::env::current_exe().context("locating the ax-bench binary")?;
    let path = me.with_file_name("ax");
    anyhow::ensure!(
        path.exists(),
        "the ax binary is not at {}; build it first with `cargo build --release -p ax` (scripts/bench does), or set AX_BIN",
        path.display()
    );
    Ok(path)
}

/// This binary, for `ax-bench worker` processes.
pub fn bench_binary() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("locating the ax-bench binary")
}

/// A service process, killed when dropped. Its output goes to a log file.
pub struct Process {
    child: tokio::process::Child,
    pub name: String,
    pub pid: u32,
}

impl Process {
    /// Starts `program args` with `env`, writing stdout and stderr to `log`.
    ///
    /// # Errors
    /// The program cannot be started or the log file created.
    pub fn spawn(name: &str, program: &Path, args: &[&str], env: &[(String, String)], log: &Path) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating the log file handle")?;
        let mut command = tokio::process::Command::new(program);
        command.args(args).stdin(Stdio::null()).stdout(out).stderr(err).kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().with_context(|| format!("starting {} {}", program.display(), args.join(" ")))?;
        let pid = child.id().context("a just-started child has a pid")?;
        tracing::info!(name, pid, "started");
        Ok(Self { child, name: name.to_owned(), pid })
    }

    /// SIGKILL, then waits until the process is gone; returns when the signal was sent.
    pub async fn kill9(&mut self) -> chrono::DateTime<chrono::Utc> {
        let at = chrono::Utc::now();
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        at
    }

    /// SIGTERM and a graceful drain of up to `grace`, then SIGKILL.
    pub async fn stop(mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        signal(self.pid, "TERM");
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            tracing::warn!(name = %self.name, "did not stop in time; killing");
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }

    /// `Some(status)` once the process has exited (a crash the scenario did not ask for).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Sends a signal with `kill(1)`: the workspace forbids `unsafe`, so no libc here.
pub fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status();
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// User plus system CPU time of a process so far, in ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after it are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after "pid (comm) ".
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Resident memory now and at its peak (`VmRSS`, `VmHWM`), in bytes.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The backing services on this machine, by process name, for the CPU split.
pub fn backing_services() -> Vec<(String, u32)> {
    let wanted = ["mariadbd", "mysqld", "nats-server", "redis-server"];
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { continue };
        let comm = comm.trim();
        if wanted.contains(&comm) {
            found.push((comm.to_owned(), pid));
        }
    }
    found.sort();
    found
}

/// CPU used by each of a set of processes over a window.
pub struct CpuMeter {
    start: Vec<(String, u32, Option<u64>)>,
    began: Instant,
    ticks: f64,
}

/// One process's share of a window.
#[derive(Debug, Clone, Serialize)]
pub struct CpuUse {
    pub process: String,
    pub cpu_seconds: f64,
    /// Of one core: 200% means both cores of a 2-core machine the whole time.
    pub percent_of_one_core: f64,
}

impl CpuMeter {
    pub fn start(processes: &[(String, u32)]) -> Self {
        Self {
            start: processes.iter().map(|(n, p)| (n.clone(), *p, cpu_ticks(*p))).collect(),
            began: Instant::now(),
            ticks: clock_ticks(),
        }
    }

    pub fn finish(&self) -> Vec<CpuUse> {
        let wall = self.began.elapsed().as_secs_f64().max(1e-9);
        self.start
            .iter()
            .filter_map(|(name, pid, before)| {
                let used = cpu_ticks(*pid)?.saturating_sub((*before)?) as f64 / self.ticks;
                Some(CpuUse { process: name.clone(), cpu_seconds: used, percent_of_one_core: used / wall * 100.0 })
            })
            .collect()
    }
}

/// Samples a process's resident memory every `every` until stopped; the peak.
pub struct RssSampler {
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let token = stop.clone();
        let handle = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                if let Some((now, _)) = rss(pid) {
                    peak = peak.max(now);
                }
                tokio::select! {
                    _ = token.cancelled() => return peak,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        });
        Self { stop, handle }
    }

    /// The highest resident memory seen, in bytes.
    pub async fn finish(self) -> u64 {
        self.stop.cancel();
        self.handle.await.unwrap_or(0)
    }
}

/// A `perf record` of some processes, when `perf` is installed and asked for.
pub struct Perf {
    child: Option<std::process::Child>,
    pub output: PathBuf,
}

impl Perf {
    /// Starts sampling `pids` on the CPU clock (hardware counters are often missing
    /// in VMs); does nothing if `perf` cannot start.
    pub fn start(pids: &[u32], output: PathBuf) -> Self {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let child = std::process::Command::new("perf")
            .args(["record", "-e", "cpu-clock", "-F", "499", "-g", "-o"])
            .arg(&output)
            .args(["-p", &list.join(",")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| tracing::warn!(error = %err, "perf record did not start; no profile"))
            .ok();
        Self { child, output }
    }

    /// Stops recording (SIGINT, as perf expects) and waits for the file.
    pub fn finish(mut self) -> Option<PathBuf> {
        let mut child = self.child.take()?;
        signal(child.id(), "INT");
        let _ = child.wait();
        Some(self.output)
    }
}
