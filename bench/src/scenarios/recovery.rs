//! Scenario 5a, recovery from a worker crash: 2,000 instances of a 100 ms handler on two
//! `ax-bench worker` processes (8 slots each); 2 s after the first trigger one of
//! them is `kill -9`ed, and 3 s later a worker is started in its place (with a new
//! id, as `ax worker` does by default). The default 30 s lease applies; the task
//! allows 3 attempts 1 s apart (with the default single attempt, the attempts the
//! crash interrupted fail instead of running again).
//!
//! Figures: instances lost (not SUCCEEDED 75 s after the kill), instances whose
//! handler ran twice (from the handler's own records in Redis) and that MySQL
//! moved to RUNNING twice, handlers that completed twice, and the time from the
//! kill to the last completion.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ax_domain::protocol::Heartbeat;
use ax_domain::Timestamp;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;

use crate::db;
use crate::env::{event_task, BenchEnv};
use crate::report::{Figure, Report, Target, Unit};
use crate::scenarios::Ctx;
use crate::triggers;
use crate::worker::{finished_key, started_key};

const S: &str = "5 recovery";
const COUNT: usize = 2_000;
const KILL_AFTER: Duration = Duration::from_secs(2);
const RESTART_AFTER: Duration = Duration::from_secs(3);
const LOST_AFTER: Duration = Duration::from_secs(75);

/// # Errors
/// A service failed under the harness.
pub async fn run(ctx: &Ctx, same_id: bool, report: &mut Report) -> anyhow::Result<()> {
    let env = BenchEnv::new("rec", &ctx.servers, &ctx.log_dir, 8).await?;
    let result = measure(ctx, &env, same_id, report).await;
    env.cleanup().await;
    result
}

async fn measure(ctx: &Ctx, env: &BenchEnv, same_id: bool, report: &mut Report) -> anyhow::Result<()> {
    let pool = env.store.pool();
    // A crash takes the attempts running on the dead worker with it; a task that is
    // to survive one allows another attempt (the default is one attempt, no retry).
    let mut definition = event_task("rec", "sleep");
    definition["execution"]["retry"] = json!({"max_attempts": 3, "backoff": "fixed", "initial_interval_sec": 1});
    let task = env.register(definition).await?;
    let mut heartbeats = env.bus.client.subscribe(env.names.heartbeat()).await?;
    let scheduler = env.spawn("scheduler", &ctx.ax, &["scheduler"])?;
    env.wait_for_leader(Duration::from_secs(30)).await?;
    let worker_args = |id: &'static str| ["worker", "--max-running", "8", "--worker-id", id];
    let mut victim = env.spawn("worker0", &ctx.bench, &worker_args("bench-w0"))?;
    let survivor = env.spawn("worker1", &ctx.bench, &worker_args("bench-w1"))?;
    let mut seen = HashSet::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.len() < 2 {
            let Some(message) = heartbeats.next().await else { break };
            if let Ok(beat) = serde_json::from_slice::<Heartbeat>(&message.payload) {
                seen.insert(beat.worker_id);
            }
        }
    })
    .await
    .context("the worker processes sent no heartbeat within 30 s")?;

    let began = Instant::now();
    let ids: Vec<String> = (0..COUNT).map(|i| format!("rec-{i}")).collect();
    triggers::pipelined(&env.bus, "rec", &ids, Bytes::from_static(br#"{"params": {"sleep_ms": 100}}"#)).await?;
    tokio::time::sleep(KILL_AFTER.saturating_sub(began.elapsed())).await;
    let killed_at = victim.kill9().await;
    let held_at_kill: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, COUNT(*) FROM instances WHERE worker_id = 'bench-w0' AND state IN ('DISPATCHED', 'RUNNING') GROUP BY state")
            .fetch_all(pool)
            .await?;
    let done_at_kill = db::count_in_state(pool, task.id.as_str(), "SUCCEEDED").await?;
    tokio::time::sleep(RESTART_AFTER).await;
    let replacement_id = if same_id { "bench-w0" } else { "bench-w0-restarted" };
    let replacement = env.spawn("worker0-restarted", &ctx.bench, &worker_args(replacement_id))?;

    let deadline = LOST_AFTER.saturating_sub((ax_domain::now() - killed_at).to_std().unwrap_or_default());
    let succeeded = db::wait_for_state(pool, task.id.as_str(), "SUCCEEDED", COUNT as u64, deadline).await?;
    let lost = COUNT as u64 - succeeded.min(COUNT as u64);

    let last_finished: Option<Timestamp> =
        sqlx::query_scalar("SELECT MAX(finished_at) FROM instances WHERE task_id = ?").bind(task.id.as_str()).fetch_one(pool).await?;
    let last_done = (lost == 0).then(|| last_finished.map(|t| (t - killed_at).as_seconds_f64())).flatten();
    let running_twice: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT instance_id FROM instance_transitions WHERE task_name = 'rec' AND to_state = 'RUNNING' \
         GROUP BY instance_id HAVING COUNT(*) > 1) twice",
    )
    .fetch_one(pool)
    .await?;
    let states: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>("SELECT state, COUNT(*) FROM instances WHERE task_id = ? GROUP BY state")
        .bind(task.id.as_str())
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
    let stuck: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, state, worker_id FROM instances WHERE task_id = ? AND state NOT IN ('SUCCEEDED') ORDER BY id LIMIT 50",
    )
    .bind(task.id.as_str())
    .fetch_all(pool)
    .await?;
    let mut redis = env.queues.connection();
    let started: HashMap<String, i64> = redis::cmd("HGETALL").arg(started_key(&env.namespace)).query_async(&mut redis).await.unwrap_or_default();
    let finished: HashMap<String, i64> = redis::cmd("HGETALL").arg(finished_key(&env.namespace)).query_async(&mut redis).await.unwrap_or_default();
    let ran_twice = started.values().filter(|n| **n > 1).count();
    let completed_twice = finished.values().filter(|n| **n > 1).count();
    let started_not_finished = started.keys().filter(|id| !finished.contains_key(*id)).count();

    for process in [replacement, survivor, scheduler] {
        process.stop(Duration::from_secs(10)).await;
    }

    report.push(
        Figure::new(S, "worker kill: instances lost (not SUCCEEDED 75 s after)", Some(lost as f64), Unit::Count)
            .target(Target::AtMost(0.0))
            .note(format!(
                "{COUNT} instances of a 100 ms handler; {done_at_kill} were done at the kill; restarted {}",
                if same_id { "under the same worker id" } else { "under a new worker id" }
            )),
    );
    report.push(
        Figure::new(S, "worker kill: handlers completed twice", Some(completed_twice as f64), Unit::Count)
            .target(Target::AtMost(0.0))
            .note("the handler's own count in Redis"),
    );
    report.push(
        Figure::new(S, "worker kill: handlers started twice", Some(ran_twice as f64), Unit::Count)
            .note(format!("MySQL moved {running_twice} instances to RUNNING twice; {started_not_finished} handler runs never finished (killed)")),
    );
    report.push(
        Figure::new(S, "worker kill → last instance done", last_done, Unit::Seconds)
            .target(Target::AtMost(35.0))
            .note(match (lost, last_finished) {
                (0, _) => "default 30 s lease".to_owned(),
                (_, Some(last)) => format!(
                    "never: {lost} instances did not finish; the other {succeeded} were done {:.1}s after the kill",
                    (last - killed_at).as_seconds_f64()
                ),
                (_, None) => format!("never: {lost} instances did not finish"),
            }),
    );
    report.detail(
        "recovery",
        json!({
            "instances": COUNT,
            "restarted_under_same_id": same_id,
            "killed_at": killed_at,
            "held_by_killed_worker_at_kill": held_at_kill,
            "succeeded_at_kill": done_at_kill,
            "succeeded": succeeded,
            "states_at_end": states,
            "not_succeeded_sample": stuck,
            "handler_started_twice": ran_twice,
            "handler_completed_twice": completed_twice,
            "mysql_running_twice": running_twice,
            "last_finished": last_finished,
        }),
    );
    Ok(())
}
