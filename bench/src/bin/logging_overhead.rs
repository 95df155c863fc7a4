//! How much `ctx.log` slows a handler that logs in a tight loop.
//!
//! A "handler" does `LINES` units of work, each followed by one log line, four
//! ways: without logging; with a disabled logger (formatting and the call, no
//! shipping); with shipping deferred (a shipper that lingers an hour: the cost on
//! the handler's own path, stamping and buffering); and with the real shipper
//! publishing to NATS JetStream (`AX_LOGS` in a namespace of its own) while the
//! handler runs, which on a small machine also competes for its CPU. Each is run `ROUNDS` times per work size, the three
//! back to back in alternating order. Reported: the fastest run of each, and the
//! overhead as the median over rounds of (shipped / no logging − 1) within a
//! round — runs of one round are seconds apart, so load from other processes on
//! a shared machine mostly cancels out. The shipper's counts (lines published,
//! dropped) show whether anything was lost on the way.
//!
//! ```sh
//! cargo run --release -p ax-bench --bin logging-overhead   # NATS at AX_BENCH_NATS_URL or 127.0.0.1:4222
//! ```
//! Results are printed and written to `bench/results/logging_overhead.json`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ax_bus::Bus;
use ax_domain::ids::{InstanceId, TraceId, WorkerId};
use ax_domain::subjects::Names;
use ax_worker::{LogShipper, TaskLogger};

const LINES: usize = 100_000;

fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(std::sync::atomic::Ordering::Relaxed)
}
const ROUNDS: usize = 9;
/// Units of work between two log lines; one unit hashes 64 bytes (about 50 ns).
const WORK_SIZES: [u32; 4] = [10, 40, 100, 400];

/// A stand-in for a handler's per-record work: FNV-1a over a small buffer, `units` times.
fn work(units: u32, seed: u64) -> u64 {
    let mut buffer = [0u8; 64];
    let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    for _ in 0..units {
        for (i, b) in buffer.iter_mut().enumerate() {
            *b = (hash >> (i % 8)) as u8;
        }
        for b in black_box(&buffer) {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[derive(Clone, Copy)]
enum Variant {
    NoLogging,
    DisabledLogger,
    Deferred,
    Shipped,
}

fn handler(variant: Variant, logger: &TaskLogger, units: u32) -> Duration {
    let started = Instant::now();
    let mut checksum = 0u64;
    for i in 0..LINES {
        checksum = work(units, checksum ^ i as u64);
        match variant {
            Variant::NoLogging => {}
            Variant::DisabledLogger | Variant::Deferred | Variant::Shipped => logger.info(format!("processed record {i} checksum {checksum:016x}")),
        }
    }
    black_box(checksum);
    started.elapsed()
}

/// (fastest, median)
fn summary(mut values: Vec<Duration>) -> (Duration, Duration) {
    values.sort();
    (values[0], values[values.len() / 2])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("AX_BENCH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let id = ulid::Ulid::new().to_string().to_ascii_lowercase();
    let names = Names::new(&format!("axb_{}", &id[id.len() - 12..]));
    let bus = Bus::connect(&url, names, "ax-bench").await?;
    bus.apply_definitions().await?;
    let shipper = LogShipper::start(bus.clone(), 65_536, Duration::from_millis(100));
    // Holds every line of every deferred run until the end.
    let deferred = LogShipper::start(bus.clone(), 64 << 20, Duration::from_secs(3600));
    let worker: WorkerId = "bench-worker".parse()?;
    let trace = TraceId::generate();
    let disabled = TaskLogger::disabled();

    println!("{LINES} lines per run, {ROUNDS} rounds, 2 runtime threads; times are the fastest run");
    println!(
        "{:>10} {:>11} {:>11} {:>11} {:>11} {:>17} {:>17}",
        "work/line", "no logging", "disabled", "deferred", "shipped", "deferred overhead", "shipped overhead"
    );
    let mut results = Vec::new();
    for units in WORK_SIZES {
        let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            // Alternate the order so warm-up and drift favour no variant.
            let order = if round % 2 == 0 { [0, 1, 2, 3] } else { [3, 2, 1, 0] };
            for which in order {
                let variant = [Variant::NoLogging, Variant::DisabledLogger, Variant::Deferred, Variant::Shipped][which];
                let logger = match variant {
                    Variant::Shipped => shipper.logger("bench", &InstanceId::generate(), 1, &worker, &trace),
                    Variant::Deferred => deferred.logger("bench", &InstanceId::generate(), 1, &worker, &trace),
                    _ => disabled.clone(),
                };
                // The handler runs as a task on a runtime thread, as in a worker; the
                // shipper runs on the other one.
                let elapsed = tokio::spawn(async move { handler(variant, &logger, units) }).await?;
                times[which].push(elapsed);
                // Let the shipper catch up between runs so runs do not overlap.
                while shipper.pending_lines() > 0 || load(&shipper.stats().published) < load(&shipper.stats().accepted) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        let paired = |variant: usize| {
            let mut ratios: Vec<f64> = times[variant].iter().zip(&times[0]).map(|(v, n)| v.as_secs_f64() / n.as_secs_f64() - 1.0).collect();
            ratios.sort_by(f64::total_cmp);
            (ratios[ratios.len() / 2], ratios)
        };
        let (deferred_overhead, deferred_ratios) = paired(2);
        let (shipped_overhead, shipped_ratios) = paired(3);
        let [(none, none_med), (disabled_t, disabled_med), (deferred_t, deferred_med), (shipped, shipped_med)] = times.map(summary);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let work_ns = none.as_secs_f64() * 1e9 / LINES as f64;
        println!(
            "{:>8.0}ns {:>9.1}ms {:>9.1}ms {:>9.1}ms {:>9.1}ms {:>9.1}% ({:>4.0}ns) {:>9.1}% ({:>4.0}ns)",
            work_ns,
            ms(none),
            ms(disabled_t),
            ms(deferred_t),
            ms(shipped),
            deferred_overhead * 100.0,
            deferred_overhead * work_ns,
            shipped_overhead * 100.0,
            shipped_overhead * work_ns,
        );
        let pct = |ratios: &[f64]| ratios.iter().map(|r| r * 100.0).collect::<Vec<_>>();
        results.push(serde_json::json!({
            "work_units": units,
            "work_ns_per_line": work_ns,
            "no_logging_ms": { "fastest": ms(none), "median": ms(none_med) },
            "disabled_logger_ms": { "fastest": ms(disabled_t), "median": ms(disabled_med) },
            "deferred_ms": { "fastest": ms(deferred_t), "median": ms(deferred_med) },
            "shipped_ms": { "fastest": ms(shipped), "median": ms(shipped_med) },
            "deferred_overhead_percent": { "paired_median": deferred_overhead * 100.0, "per_round": pct(&deferred_ratios) },
            "shipped_overhead_percent": { "paired_median": shipped_overhead * 100.0, "per_round": pct(&shipped_ratios) },
        }));
    }
    // The cost of one call on the handler's path, without the handler's work:
    // formatting alone, then formatting and logging with shipping deferred.
    let calls = 1_000_000;
    let per_call = |log: Option<&TaskLogger>| {
        let started = Instant::now();
        for i in 0..calls {
            let message = format!("processed record {i} checksum {:016x}", i * 7);
            match log {
                Some(log) => log.info(message),
                None => drop(black_box(message)),
            }
        }
        started.elapsed().as_nanos() as f64 / calls as f64
    };
    let mut format_only = f64::MAX;
    let mut logged = f64::MAX;
    for _ in 0..5 {
        format_only = format_only.min(per_call(None));
        let log = deferred.logger("bench", &InstanceId::generate(), 1, &worker, &trace);
        logged = logged.min(per_call(Some(&log)));
    }
    println!("one call: formatting the message {format_only:.0} ns; formatting and ctx.log.info with shipping deferred {logged:.0} ns; the logger itself {:.0} ns", logged - format_only);

    shipper.close().await;
    deferred.close().await;
    let stats = shipper.stats();
    println!(
        "shipper: {} lines accepted, {} published in {} batches, {} dropped",
        load(&stats.accepted),
        load(&stats.published),
        load(&stats.batches),
        load(&stats.dropped)
    );
    let out = serde_json::json!({
        "per_call_ns": { "format_only": format_only, "format_and_log_deferred": logged, "logger": logged - format_only },
        "lines_per_run": LINES,
        "rounds": ROUNDS,
        "results": results,
        "accepted": load(&stats.accepted),
        "published": load(&stats.published),
        "batches": load(&stats.batches),
        "dropped": load(&stats.dropped),
    });
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/results/logging_overhead.json");
    std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    println!("written to {path}");
    for stream in bus.stream_configs()? {
        let _ = bus.jetstream.delete_stream(&stream.name).await;
    }
    Ok(())
}
