//! `ax-bench`: the AX benchmark harness (issue 6).
//!
//! `scripts/bench` (or, with the services up and `ax` built in release mode,
//! `cargo run --release -p ax-bench -- all`) runs every scenario against the real
//! MariaDB/MySQL, Redis and NATS that `scripts/services` provides, prints a table
//! and writes `bench/results/<timestamp>.json` (copied to `latest.json`).
//!
//! # Layout
//! - [`scenarios`]: one file per scenario of the issue, plus the shared stage
//! - [`env`]: a scenario's sandbox (database, namespace) and its `ax` processes
//! - [`procs`]: processes, `kill -9`, RSS and CPU from `/proc`, `perf record`
//! - [`db`]: MySQL settings, counters and the audit-trail analysis
//! - [`triggers`]: pipelined and paced trigger publishing
//! - [`worker`]: `ax-bench worker`, an SDK worker with `noop` and `sleep` handlers
//! - [`stats`], [`report`]: percentiles, the table and the JSON file

mod db;
mod env;
mod procs;
mod prometheus;
mod report;
mod scenarios;
mod stats;
mod triggers;
mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::env::Servers;
use crate::report::Report;
use crate::scenarios::{ceilings, cron, delay, failover, latency, recovery, stage, throughput, Ctx};

#[derive(Parser)]
#[command(name = "ax-bench", about = "AX benchmark harness (issue 6); see bench/README.md")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Debug)]
struct RunArgs {
    /// Scale down to finish in a few minutes: cron 10,000 tasks × 1 minute, shorter ceilings.
    #[arg(long)]
    quick: bool,
    /// Instances in the throughput scenario.
    #[arg(long, default_value_t = 10_000)]
    instances: usize,
    /// Cron tasks [default: 100,000, or 10,000 with --quick].
    #[arg(long)]
    cron_tasks: Option<usize>,
    /// Minutes the cron scenario watches [default: 3, or 1 with --quick].
    #[arg(long)]
    cron_minutes: Option<u32>,
    /// Assignments each worker of scenarios 1–3 takes ahead of its 8 slots
    /// (`ax worker --prefetch`). Throughput on 2 × 8 slots is bounded by the
    /// assignments in flight over their round trip; more prefetch shows where CPU
    /// bounds it instead.
    #[arg(long, default_value_t = 8)]
    prefetch: u32,
    /// Trigger rate of the latency scenario when the throughput scenario does not run
    /// in the same invocation (otherwise half of its end-to-end rate).
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Where results go [default: bench/results].
    #[arg(long)]
    results_dir: Option<PathBuf>,
    /// Rewrite the table in bench/README.md.
    #[arg(long)]
    update_readme: bool,
    /// Record a `perf` CPU profile of the throughput scenario (scheduler, workers,
    /// MariaDB, NATS, Redis) next to the logs.
    #[arg(long)]
    perf: bool,
    /// With `all`: run only these scenarios (comma-separated), e.g.
    /// `--only throughput,latency,delay` for scenarios 1–3 on one stage.
    #[arg(long, value_delimiter = ',', value_enum)]
    only: Vec<Scenario>,
    /// In the cron scenario, keep the schedules as registration left them: the
    /// scheduler then starts with every fire missed during registration.
    #[arg(long)]
    cron_stale: bool,
    /// In the recovery scenario, restart the killed worker under its old worker id
    /// (as a host-named deployment would) instead of a new one.
    #[arg(long)]
    restart_same_id: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Every scenario, in order, in one run.
    All(RunArgs),
    /// 1. 10,000 no-op instances as fast as the client can fire them.
    Throughput(RunArgs),
    /// 2. Trigger → RUNNING / SUCCEEDED at a steady rate.
    Latency(RunArgs),
    /// 3. 200 instances due 5 s after their trigger.
    Delay(RunArgs),
    /// 4. 100,000 cron tasks every minute for 3 minutes.
    Cron(RunArgs),
    /// 5a. A worker kill -9 among 2,000 100 ms instances.
    Recovery(RunArgs),
    /// 5b. The leader kill -9 under a per-second cron.
    Failover(RunArgs),
    /// 6. MySQL guarded-transition commits/s and JetStream publishes/s.
    Ceilings(RunArgs),
    /// A worker process with the `noop` and `sleep` handlers (the recovery scenario starts these).
    Worker {
        #[command(flatten)]
        config: Box<ax_runtime::Config>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Throughput,
    Latency,
    Delay,
    Cron,
    Recovery,
    Failover,
    Ceilings,
}

const ALL: [Scenario; 7] =
    [Scenario::Throughput, Scenario::Latency, Scenario::Delay, Scenario::Cron, Scenario::Recovery, Scenario::Failover, Scenario::Ceilings];

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let (selection, args) = match cli.command {
        Command::Worker { config } => {
            return match worker::run(*config).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err:#}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::All(args) if !args.only.is_empty() => (args.only.clone(), args),
        Command::All(args) => (ALL.to_vec(), args),
        Command::Throughput(args) => (vec![Scenario::Throughput], args),
        Command::Latency(args) => (vec![Scenario::Latency], args),
        Command::Delay(args) => (vec![Scenario::Delay], args),
        Command::Cron(args) => (vec![Scenario::Cron], args),
        Command::Recovery(args) => (vec![Scenario::Recovery], args),
        Command::Failover(args) => (vec![Scenario::Failover], args),
        Command::Ceilings(args) => (vec![Scenario::Ceilings], args),
    };
    let log = ax_runtime::config::LogConfig {
        log: std::env::var("AX_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        log_format: "text".into(),
    };
    ax_runtime::telemetry::init_tracing(&log);
    match run(&selection, &args).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where the processes of each scenario run; printed and saved with the figures.
fn placement() -> Vec<(&'static str, &'static str)> {
    vec![
        ("scheduler", "process: target/release/ax scheduler, one per scenario (two in 5b failover)"),
        ("workers, scenarios 1–3", "2 processes: target/release/ax worker --max-running 8 --prefetch 8 (ax-bench --prefetch N to change) (built-in noop handler)"),
        ("workers, scenario 5a", "2 processes: ax-bench worker --max-running 8 (SDK, sleep handler); one kill -9ed, a new one started 3 s later"),
        ("trigger client, MySQL reads, clocks", "in-process (ax-bench)"),
        ("cron registration and relay of its events", "in-process, before the scheduler process starts (Store::register_task, ax_scheduler::relay::pass)"),
        ("ceilings", "in-process (ax-bench): Store::transition on 32 connections, async-nats JetStream publishes"),
        ("MariaDB/MySQL, Redis, NATS", "the local servers scripts/services runs; shared with whatever else runs on this machine"),
    ]
}

async fn run(selection: &[Scenario], args: &RunArgs) -> anyhow::Result<ExitCode> {
    let started_at = chrono::Utc::now();
    let stamp = started_at.format("%Y%m%dT%H%M%SZ").to_string();
    let results_dir = args.results_dir.clone().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("results"));
    let log_dir = results_dir.join("logs").join(&stamp);
    std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    let servers = Servers::from_env();
    let ctx = Ctx { servers: servers.clone(), log_dir: log_dir.clone(), ax: procs::ax_binary()?, bench: procs::bench_binary()?, quick: args.quick, perf: args.perf, prefetch: args.prefetch };
    let cron_tasks = args.cron_tasks.unwrap_or(if args.quick { 10_000 } else { 100_000 });
    let cron_minutes = args.cron_minutes.unwrap_or(if args.quick { 1 } else { 3 });

    let mut report = Report { meta: machine_facts(&servers).await, ..Report::default() };
    report.meta.insert("started_at".into(), json!(started_at));
    report.meta.insert("command".into(), json!(std::env::args().collect::<Vec<_>>().join(" ")));
    report.meta.insert("quick".into(), json!(args.quick));
    report.meta.insert("worker_prefetch".into(), json!(args.prefetch));
    report.meta.insert("ax_binary".into(), json!(ctx.ax.display().to_string()));
    let placed: BTreeMap<&str, &str> = placement().into_iter().collect();
    report.meta.insert("placement".into(), json!(placed));
    report.meta.insert("logs".into(), json!(log_dir.display().to_string()));
    eprintln!("ax-bench: {} cores; logs of the ax processes in {}", report.meta["cores"], log_dir.display());
    for (what, place) in placement() {
        eprintln!("ax-bench:   {what}: {place}");
    }

    let mut errors: Vec<String> = Vec::new();
    let mut record = |scenario: &str, err: anyhow::Error| {
        eprintln!("ax-bench: {scenario} failed: {err:#}");
        errors.push(format!("{scenario}: {err:#}"));
    };
    let wants = |s: Scenario| selection.contains(&s);

    let mut ax_figures = None;
    if wants(Scenario::Throughput) || wants(Scenario::Latency) || wants(Scenario::Delay) {
        eprintln!("ax-bench: starting the scheduler and 2 workers for scenarios 1–3");
        match stage::Stage::start(&ctx).await {
            Ok(stage) => {
                if wants(Scenario::Throughput) {
                    eprintln!("ax-bench: 1 throughput: {} instances", args.instances);
                    match throughput::run(&ctx, &stage, args.instances, &mut report).await {
                        Ok(figures) => ax_figures = figures,
                        Err(err) => record("1 throughput", err),
                    }
                }
                if wants(Scenario::Latency) {
                    let (rate, why) = match ax_figures {
                        Some(f) => (f.instances_per_sec / 2.0, "half the measured end-to-end rate"),
                        None => (args.rate, "--rate; the throughput scenario did not run"),
                    };
                    let seconds = if args.quick { 5.0 } else { 10.0 };
                    eprintln!("ax-bench: 2 latency: {rate:.0} triggers/s for {seconds} s");
                    if let Err(err) = latency::run(&stage, rate, why, seconds, &mut report).await {
                        record("2 latency", err);
                    }
                }
                if wants(Scenario::Delay) {
                    eprintln!("ax-bench: 3 delay: 200 instances due 5 s after their trigger");
                    if let Err(err) = delay::run(&stage, &mut report).await {
                        record("3 delay", err);
                    }
                }
                stage.stop().await;
            }
            Err(err) => record("1–3 stage", err),
        }
    }
    if wants(Scenario::Cron) {
        eprintln!("ax-bench: 4 cron: {cron_tasks} tasks × {cron_minutes} min");
        if let Err(err) = cron::run(&ctx, cron_tasks, cron_minutes, args.cron_stale, &mut report).await {
            record("4 cron", err);
        }
    }
    if wants(Scenario::Recovery) {
        eprintln!("ax-bench: 5a recovery: worker kill -9 among 2,000 instances of 100 ms");
        if let Err(err) = recovery::run(&ctx, args.restart_same_id, &mut report).await {
            record("5a recovery", err);
        }
    }
    if wants(Scenario::Failover) {
        eprintln!("ax-bench: 5b failover: leader kill -9 under a per-second cron");
        if let Err(err) = failover::run(&ctx, &mut report).await {
            record("5b failover", err);
        }
    }
    if wants(Scenario::Ceilings) {
        eprintln!("ax-bench: 6 ceilings: MySQL commits, JetStream publishes");
        if let Err(err) = ceilings::run(&ctx, ax_figures, &mut report).await {
            record("6 ceilings", err);
        }
    }

    report.meta.insert("finished_at".into(), json!(chrono::Utc::now()));
    report.meta.insert("load_average_after".into(), json!(load_average()));
    report.meta.insert("errors".into(), json!(errors));
    let table = report.table();
    println!("\n{table}");
    if !errors.is_empty() {
        println!("errors:\n  {}", errors.join("\n  "));
    }
    save(&report, &results_dir, &stamp, args.update_readme)?;
    Ok(if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

/// Cores, kernel, CPU, load, and the servers' versions and durability settings.
async fn machine_facts(servers: &Servers) -> BTreeMap<String, serde_json::Value> {
    let mut meta = BTreeMap::new();
    meta.insert("cores".into(), json!(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_owned()));
    meta.insert("cpu".into(), json!(cpu));
    meta.insert("kernel".into(), json!(std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()));
    let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| s.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned()));
    meta.insert("memory_kb".into(), json!(memory));
    meta.insert("load_average_before".into(), json!(load_average()));
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    meta.insert("git_commit".into(), json!(commit));
    if let Ok(pool) = sqlx::MySqlPool::connect(&servers.mysql).await {
        meta.insert("mysql".into(), json!(db::server_facts(&pool).await));
        pool.close().await;
    }
    if let Ok(client) = async_nats::connect(&servers.nats).await {
        meta.insert("nats_version".into(), json!(client.server_info().version));
    }
    if let Ok(client) = redis::Client::open(servers.redis.as_str())
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await
    {
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await.unwrap_or_default();
        let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).map(str::to_owned);
        meta.insert("redis_version".into(), json!(version));
    }
    meta
}

const README_BEGIN: &str = "<!-- bench:table:begin -->";
const README_END: &str = "<!-- bench:table:end -->";

/// `results/<stamp>.json`, `results/latest.json`, `results/latest.md`, and the
/// README's table when asked.
fn save(report: &Report, dir: &Path, stamp: &str, update_readme: bool) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    let file = dir.join(format!("{stamp}.json"));
    std::fs::write(&file, &json).with_context(|| format!("writing {}", file.display()))?;
    std::fs::write(dir.join("latest.json"), &json).context("writing latest.json")?;
    let meta = &report.meta;
    let mysql = &meta["mysql"];
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
    let markdown = format!(
        "Measured {} by `{}` at commit {} on {} cores ({}), load average {} before and {} after; \
         MariaDB {} with innodb_flush_log_at_trx_commit={}, sync_binlog={}, log_bin={}; NATS {}; Redis {}.\n\n{}",
        text(&meta["started_at"]),
        text(&meta["command"]),
        text(&meta["git_commit"]),
        meta["cores"],
        text(&meta["cpu"]),
        text(&meta["load_average_before"]),
        text(&meta["load_average_after"]),
        text(&mysql["version"]),
        text(&mysql["innodb_flush_log_at_trx_commit"]),
        text(&mysql["sync_binlog"]),
        text(&mysql["log_bin"]),
        text(&meta["nats_version"]),
        text(&meta["redis_version"]),
        report.markdown(),
    );
    std::fs::write(dir.join("latest.md"), &markdown).context("writing latest.md")?;
    println!("results: {} (and latest.json, latest.md)", file.display());
    if update_readme {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let current = std::fs::read_to_string(&readme).with_context(|| format!("reading {}", readme.display()))?;
        match (current.find(README_BEGIN), current.find(README_END)) {
            (Some(begin), Some(end)) if begin < end => {
                let updated = format!("{}{README_BEGIN}\n{markdown}{}", &current[..begin], &current[end..]);
                std::fs::write(&readme, updated).with_context(|| format!("writing {}", readme.display()))?;
                println!("updated the table in {}", readme.display());
            }
            _ => eprintln!("ax-bench: {} has no {README_BEGIN} … {README_END} block; not updated", readme.display()),
        }
    }
    Ok(())
}
