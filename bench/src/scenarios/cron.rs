//! Scenario 4, cron at scale: `tasks` cron tasks firing every minute, spread evenly
//! across the 60 seconds of the minute (task i fires at second i mod 60), watched
//! for `minutes` minutes with one `ax scheduler` process and no worker, so
//! instances accumulate as CREATED.
//!
//! The tasks are registered through the store (the same code as the api), and the
//! registration events are relayed before the scheduler starts: the window
//! measures a steady state, not the digestion of 100,000 `registered` events.
//!
//! Registering 100,000 tasks takes minutes here, so by the time the scheduler
//! starts most schedules' next fire has passed and the leader would begin with a
//! misfire catch-up of every task (which on this branch never completes: see the
//! README). Unless `stale` is asked for, each schedule's next fire is therefore
//! moved to its first fire after the scheduler's start, computed by AX's own
//! `CronSchedule` — the state a leader finds after a clean handover.
//! Figures: fire skew, from the fire time to the instance ready to dispatch (the
//! scheduler's `ax_cron_fire_skew_seconds` histogram: for a fire created ahead of
//! its time, the timer's wake-up; for one created at its time, the commit), the
//! commit time against the fire time (`created_at − due_at` of each instance, both
//! stamped by AX; negative when created ahead), fires missing, the scheduler's
//! peak RSS and CPU.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_domain::Timestamp;
use serde_json::json;

use crate::db::Counters;
use crate::env::BenchEnv;
use crate::procs::{rss, CpuMeter, RssSampler};
use crate::prometheus::{scrape, Histogram};
use crate::report::{Figure, Report, Target, Unit};
use crate::scenarios::{with_backing_services, Ctx};
use crate::stats::{rate, summarize};

const S: &str = "4 cron";
const SKEW_METRIC: &str = "ax_cron_fire_skew_seconds";
const REGISTER_CONCURRENCY: usize = 8;

fn definition(i: usize) -> serde_json::Value {
    json!({
        "task_name": format!("c{i:06}"),
        "owner": "ax-bench",
        "triggers": [{"type": "cron", "cron": format!("{} * * * * *", i % 60)}],
        "execution": {"handler": "noop", "timeout": 60}
    })
}

/// # Errors
/// A service failed under the harness.
pub async fn run(ctx: &Ctx, tasks: usize, minutes: u32, stale: bool, report: &mut Report) -> anyhow::Result<()> {
    let env = BenchEnv::new("cron", &ctx.servers, &ctx.log_dir, REGISTER_CONCURRENCY as u32).await?;
    let result = measure(ctx, &env, tasks, minutes, stale, report).await;
    env.cleanup().await;
    result
}

async fn measure(ctx: &Ctx, env: &BenchEnv, tasks: usize, minutes: u32, stale: bool, report: &mut Report) -> anyhow::Result<()> {
    let pool = env.store.pool();

    // Registration, 32 at a time, through Store::register_task.
    let began = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicU64::new(0));
    let mut registrars = tokio::task::JoinSet::new();
    for _ in 0..REGISTER_CONCURRENCY {
        let next = next.clone();
        let busy = busy.clone();
        let store = env.store.clone();
        registrars.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tasks {
                    return anyhow::Ok(());
                }
                let definition = ax_domain::task::TaskDefinition::from_json(definition(i).to_string().as_bytes())
                    .map_err(|e| anyhow::anyhow!("cron task definition is invalid: {e}"))?;
                // The store retries lock conflicts a few times, then says Busy, and a
                // client retries, as it would after a 503. The retries are counted
                // (1,711 of 100,000 before registration ran under READ COMMITTED).
                let mut tries = 0u64;
                loop {
                    match store.register_task(&definition, "ax-bench").await {
                        Ok(_) => break,
                        Err(ax_store::StoreError::Busy { .. }) if tries < 50 => {
                            tries += 1;
                            busy.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(10 * tries)).await;
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
                if (i + 1).is_multiple_of(10_000) {
                    eprintln!("ax-bench: cron: {} of {tasks} tasks registered", i + 1);
                }
            }
        });
    }
    while let Some(done) = registrars.join_next().await {
        done??;
    }
    let registration = began.elapsed();
    let busy = busy.load(Ordering::Relaxed);

    // The registration events go out before the scheduler exists (see the module doc).
    let began = Instant::now();
    let deps = ax_scheduler::Deps { store: env.store.clone(), bus: env.bus.clone(), queues: env.queues.clone() };
    while ax_scheduler::relay::pass(&deps).await? > 0 {}
    let relayed = began.elapsed();

    // No schedule may be missed when the scheduler starts (see the module doc).
    let first_fire = Timestamp::from_timestamp(ax_domain::now().timestamp() + 12, 0).unwrap_or_else(ax_domain::now);
    let missed_at_start: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM cron_schedules WHERE next_fire_at < ?").bind(first_fire).fetch_one(pool).await?;
    if !stale {
        let expressions: Vec<(String, String)> = sqlx::query_as("SELECT DISTINCT expression, timezone FROM cron_schedules").fetch_all(pool).await?;
        for (expression, timezone) in expressions {
            let schedule = ax_domain::cron_expr::CronSchedule::parse(&expression, &timezone).map_err(|e| anyhow::anyhow!("{expression}: {e}"))?;
            let next = schedule.next_after(first_fire - chrono::TimeDelta::microseconds(1)).ok_or_else(|| anyhow::anyhow!("{expression} never fires"))?;
            sqlx::query("UPDATE cron_schedules SET next_fire_at = ? WHERE expression = ? AND timezone = ?")
                .bind(next)
                .bind(&expression)
                .bind(&timezone)
                .execute(pool)
                .await?;
        }
    }

    // The skew of a fire created ahead is its wake-up in the leader's timer, which
    // only the scheduler's own histogram sees.
    let metrics_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.to_string()
    };
    let scheduler = env.spawn("scheduler", &ctx.ax, &["scheduler", "--metrics-addr", &metrics_addr])?;
    env.wait_for_leader(Duration::from_secs(30)).await?;
    let rss_at_start = rss(scheduler.pid).map(|(now, _)| now);

    // The window starts with the first fire, or on a whole second after leadership.
    let now = ax_domain::now();
    let window_start = first_fire.max(Timestamp::from_timestamp(now.timestamp() + 2, 0).unwrap_or(now));
    let window_end = window_start + chrono::TimeDelta::seconds(i64::from(minutes) * 60);
    let just_before = |at: Timestamp| (at - chrono::TimeDelta::milliseconds(300) - ax_domain::now()).to_std().unwrap_or_default();
    tokio::time::sleep(just_before(window_start)).await;
    let skew_before = Histogram::parse(&scrape(&metrics_addr).await?, SKEW_METRIC);
    tokio::time::sleep((window_start - ax_domain::now()).to_std().unwrap_or_default()).await;
    let sampler = RssSampler::start(scheduler.pid, Duration::from_millis(500));
    let cpu = CpuMeter::start(&with_backing_services(vec![("ax scheduler".to_owned(), scheduler.pid)]));
    let counters_before = Counters::read(pool).await;
    eprintln!("ax-bench: cron: measuring {tasks} tasks for {minutes} min from {window_start}");
    // Fires are whole seconds: the window's last is woken before this scrape, the
    // fire at its end after.
    tokio::time::sleep(just_before(window_end)).await;
    let ready_skew = Histogram::parse(&scrape(&metrics_addr).await?, SKEW_METRIC).since(&skew_before);
    tokio::time::sleep((window_end - ax_domain::now()).to_std().unwrap_or_default()).await;
    let cpu_use = cpu.finish();
    let counters = Counters::read(pool).await.since(&counters_before);
    let peak_rss = sampler.finish().await;
    let window = (window_end - window_start).as_seconds_f64();

    // Late fires still count (as late); wait until nothing more arrives.
    let expected = tasks as u64 * u64::from(minutes);
    let mut fired = 0;
    let mut unchanged_since = Instant::now();
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(90) {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE trigger_type = 'cron' AND due_at >= ? AND due_at < ?")
            .bind(window_start)
            .bind(window_end)
            .fetch_one(pool)
            .await?;
        let n = n.max(0) as u64;
        if n != fired {
            fired = n;
            unchanged_since = Instant::now();
        }
        if fired >= expected || unchanged_since.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rows: Vec<(Timestamp, i64)> = sqlx::query_as(
        "SELECT due_at, TIMESTAMPDIFF(MICROSECOND, due_at, created_at) FROM instances WHERE trigger_type = 'cron' AND due_at >= ? AND due_at < ?",
    )
    .bind(window_start)
    .bind(window_end)
    .fetch_all(pool)
    .await?;
    let mut per_minute: Vec<Vec<f64>> = vec![Vec::new(); minutes as usize];
    for (due, us) in &rows {
        let minute = ((*due - window_start).num_seconds() / 60).clamp(0, i64::from(minutes) - 1) as usize;
        per_minute[minute].push(*us as f64 / 1000.0);
    }
    let per_minute: Vec<_> = per_minute.iter_mut().map(|v| summarize(v)).collect();
    let mut skews: Vec<f64> = rows.iter().map(|(_, us)| *us as f64 / 1000.0).collect();
    let created_ahead = skews.iter().filter(|ms| **ms < 0.0).count();
    let commit_vs_fire = summarize(&mut skews);
    let ms = |q: f64| ready_skew.quantile(q).map(|s| s * 1000.0);
    let rss_end = rss(scheduler.pid);
    let exited = {
        let mut scheduler = scheduler;
        let exited = scheduler.exited();
        scheduler.stop(Duration::from_secs(10)).await;
        exited
    };

    let scheduler_cpu = cpu_use.iter().find(|c| c.process == "ax scheduler").map(|c| c.percent_of_one_core);
    let mysql_cpu = cpu_use.iter().find(|c| c.process == "mariadbd" || c.process == "mysqld").map(|c| c.percent_of_one_core);
    let scale = format!("{tasks} tasks × {minutes} min");
    report.push(
        Figure::new(S, "tasks registered per second (setup)", rate(tasks as u64, registration.as_secs_f64()), Unit::PerSec)
            .note(format!(
                "Store::register_task from {REGISTER_CONCURRENCY} tasks, {busy} registrations refused Busy (deadlock) and retried; relaying their events took {:.1}s",
                relayed.as_secs_f64()
            )),
    );
    let skew_note = format!(
        "{:.0} fires seen by the scheduler's {SKEW_METRIC} in the window: a fire created ahead is ready when the timer wakes the dispatcher for it, one created at its time when committed; estimated within the histogram's buckets",
        ready_skew.count()
    );
    report.push(Figure::new(S, format!("fire skew, fire time → ready to dispatch p50 ({scale})"), ms(0.5), Unit::Ms).note(skew_note.clone()));
    report.push(Figure::new(S, format!("fire skew, fire time → ready to dispatch p99 ({scale})"), ms(0.99), Unit::Ms).target(Target::AtMost(50.0)).note(skew_note));
    report.push(
        Figure::new(S, "fires committed ahead of their time", Some(100.0 * created_ahead as f64 / rows.len().max(1) as f64), Unit::Percent)
            .note("tasks without a concurrency limit have a fire's instance created as it enters the planner's 3 s window"),
    );
    report.push_summary(S, &format!("commit − fire time, created − due ({scale})"), commit_vs_fire, None);
    report.push(
        Figure::new(S, "fires missing after the window", Some(expected.saturating_sub(fired) as f64), Unit::Count)
            .target(Target::AtMost(0.0))
            .note(format!("{fired} of {expected} fires committed")),
    );
    report.push(
        Figure::new(S, "scheduler peak RSS", Some(peak_rss as f64 / 1e6), Unit::Mb)
            .target(Target::AtMost(200.0))
            .note(format!("sampled every 0.5 s in the window; {:.1} MB at start", rss_at_start.unwrap_or(0) as f64 / 1e6)),
    );
    report.push(Figure::new(S, "scheduler CPU (of one core)", scheduler_cpu, Unit::Percent));
    report.push(Figure::new(S, "MySQL CPU (of one core)", mysql_cpu, Unit::Percent));
    let statements = counters.get("Questions").copied().unwrap_or(0);
    report.push(
        Figure::new(S, "MySQL statements per second", Some(statements as f64 / window), Unit::PerSec)
            .note("server-wide Questions over the window"),
    );
    report.detail(
        "cron",
        json!({
            "tasks": tasks,
            "minutes": minutes,
            "window_start": window_start,
            "window_end": window_end,
            "registration_seconds": registration.as_secs_f64(),
            "registration_busy_retries": busy,
            "relay_registration_events_seconds": relayed.as_secs_f64(),
            "expected_fires": expected,
            "committed_fires": fired,
            "commit_minus_fire_ms": commit_vs_fire,
            "fires_committed_ahead": created_ahead,
            "ready_skew_histogram_seconds": ready_skew.buckets.iter().map(|(le, n)| json!([if le.is_finite() { json!(le) } else { json!("+Inf") }, n])).collect::<Vec<_>>(),
            "ready_skew_ms": {"p50": ms(0.5), "p99": ms(0.99), "p999": ms(0.999)},
            "commit_minus_fire_ms_per_minute": per_minute,
            "stale_schedules_kept": stale,
            "schedules_missed_when_the_scheduler_started": if stale { missed_at_start } else { 0 },
            "schedules_moved_to_their_next_fire": if stale { 0 } else { missed_at_start },
            "scheduler_rss_peak_bytes": peak_rss,
            "scheduler_rss_start_bytes": rss_at_start,
            "scheduler_rss_end_and_hwm_bytes": rss_end,
            "scheduler_exited_early": exited.map(|s| s.to_string()),
            "cpu": cpu_use,
            "mysql_counters": counters,
        }),
    );
    Ok(())
}
