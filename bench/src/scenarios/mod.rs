//! The scenarios of issue 6, each in its own file.
//!
//! # Layout
//! - [`stage`]: scheduler + 2 worker processes shared by scenarios 1–3
//! - [`throughput`]: 1. 10,000 no-op instances fired as fast as the client allows
//! - [`latency`]: 2. trigger → RUNNING / SUCCEEDED at half the measured rate
//! - [`delay`]: 3. 200 instances due 5 s after their trigger
//! - [`cron`]: 4. 100,000 cron tasks (10,000 with `--quick`), skew, scheduler RSS/CPU
//! - [`recovery`]: 5a. a worker `kill -9`ed in the middle of 2,000 100 ms instances
//! - [`failover`]: 5b. the leader `kill -9`ed under a per-second cron
//! - [`ceilings`]: 6. guarded-transition commits/s on MySQL and JetStream publishes/s

pub mod ceilings;
pub mod cron;
pub mod delay;
pub mod failover;
pub mod latency;
pub mod recovery;
pub mod stage;
pub mod throughput;

use std::path::PathBuf;

use crate::env::Servers;

/// What every scenario needs to know about the run.
pub struct Ctx {
    pub servers: Servers,
    pub log_dir: PathBuf,
    /// `target/release/ax`.
    pub ax: PathBuf,
    /// This binary, for `ax-bench worker` processes.
    pub bench: PathBuf,
    pub quick: bool,
    /// Record a `perf` profile of the throughput scenario.
    pub perf: bool,
    /// `ax worker --prefetch` of the scenario 1–3 workers.
    pub prefetch: u32,
}

/// `ax` processes plus the backing services and this harness: everything whose CPU
/// a window is split between.
pub fn with_backing_services(ax: Vec<(String, u32)>) -> Vec<(String, u32)> {
    let mut all = ax;
    all.extend(crate::procs::backing_services());
    all.push(("ax-bench (client, in-process)".to_owned(), std::process::id()));
    all
}
