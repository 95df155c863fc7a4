//! Scenario 2, latency at half the measured maximum rate: from a trigger's publish
//! to its instance RUNNING and SUCCEEDED.
//!
//! Two views of each moment: MySQL's (`started_at` / `finished_at`, stamped in the
//! transaction that commits the transition — what the target is judged on) and a
//! subscriber's (the event arriving on `ax.event.instance.…`, which adds the outbox
//! relay). Publish times are taken by this process just before each publish; all
//! clocks are this machine's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_domain::Timestamp;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;

use crate::db;
use crate::report::{Figure, Report, Target, Unit};
use crate::scenarios::stage::Stage;
use crate::stats::summarize;
use crate::triggers;

const S: &str = "2 latency";

type Seen = Arc<Mutex<HashMap<(String, String), Timestamp>>>;

/// # Errors
/// A service failed under the harness.
pub async fn run(stage: &Stage, per_second: f64, why: &str, seconds: f64, report: &mut Report) -> anyhow::Result<()> {
    let env = &stage.env;
    let pool = env.store.pool();
    let task = &stage.latency_task;
    let count = ((per_second * seconds).round() as usize).max(100);

    // Every event of the task, stamped on arrival.
    let seen: Seen = Arc::default();
    let mut subscription = env.bus.client.subscribe(env.names.instance_events_of(Some("lat"))).await?;
    env.bus.client.flush().await?;
    let collector = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                let at = ax_domain::now();
                let header = |name: &str| message.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
                if let (Some(instance), Some(state)) = (header(ax_bus::headers::INSTANCE), header(ax_bus::headers::STATE)) {
                    seen.lock().expect("seen lock").entry((instance, state)).or_insert(at);
                }
            }
        })
    };

    let sent = triggers::paced(&env.bus, "lat", "lat-", count, per_second, Bytes::from_static(b"{}")).await?;
    let achieved = match (sent.first(), sent.last()) {
        (Some(a), Some(b)) if b.at > a.at => Some((sent.len() - 1) as f64 / (b.at - a.at).as_seconds_f64()),
        _ => None,
    };
    let done = db::wait_for_state(pool, task.id.as_str(), "SUCCEEDED", count as u64, Duration::from_secs(120)).await?;
    db::wait_for_empty_outbox(pool, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    collector.abort();

    let published: HashMap<&str, Timestamp> = sent.iter().map(|s| (s.trigger_id.as_str(), s.at)).collect();
    let rows: Vec<(String, String, Option<Timestamp>, Option<Timestamp>)> =
        sqlx::query_as("SELECT id, trigger_id, started_at, finished_at FROM instances WHERE task_id = ?")
            .bind(task.id.as_str())
            .fetch_all(pool)
            .await?;
    let seen = seen.lock().expect("seen lock").clone();
    let ms = |from: Timestamp, to: Timestamp| (to - from).as_seconds_f64() * 1000.0;
    let (mut running, mut succeeded, mut running_event, mut succeeded_event) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (id, trigger_id, started_at, finished_at) in &rows {
        let Some(&at) = published.get(trigger_id.as_str()) else { continue };
        running.extend(started_at.map(|t| ms(at, t)));
        succeeded.extend(finished_at.map(|t| ms(at, t)));
        running_event.extend(seen.get(&(id.clone(), "RUNNING".to_owned())).map(|t| ms(at, *t)));
        succeeded_event.extend(seen.get(&(id.clone(), "SUCCEEDED".to_owned())).map(|t| ms(at, *t)));
    }
    // Where the time to RUNNING goes: each stage's stamp is taken as its transaction
    // begins (CREATED by the intake, DISPATCHED by the dispatcher, RUNNING by the
    // report batch), so a stage includes the previous commit and the hand-off.
    let stamps: Vec<(String, String, Timestamp)> = sqlx::query_as(
        "SELECT instance_id, to_state, created_at FROM instance_transitions WHERE task_name = 'lat' AND attempt = 1 AND to_state IN ('CREATED', 'DISPATCHED', 'RUNNING')",
    )
    .fetch_all(pool)
    .await?;
    let mut by_instance: HashMap<&str, [Option<Timestamp>; 3]> = HashMap::new();
    for (id, state, at) in &stamps {
        let slot = match state.as_str() {
            "CREATED" => 0,
            "DISPATCHED" => 1,
            _ => 2,
        };
        by_instance.entry(id.as_str()).or_default()[slot].get_or_insert(*at);
    }
    let (mut to_created, mut to_dispatched, mut to_running) = (Vec::new(), Vec::new(), Vec::new());
    for (id, trigger_id, _, _) in &rows {
        let (Some(&at), Some(stages)) = (published.get(trigger_id.as_str()), by_instance.get(id.as_str())) else { continue };
        if let [Some(created), Some(dispatched), Some(running)] = *stages {
            to_created.push(ms(at, created));
            to_dispatched.push(ms(created, dispatched));
            to_running.push(ms(dispatched, running));
        }
    }
    let stages = [
        ("stage: publish → CREATED stamped", summarize(&mut to_created)),
        ("stage: CREATED → DISPATCHED stamped", summarize(&mut to_dispatched)),
        ("stage: DISPATCHED → RUNNING stamped", summarize(&mut to_running)),
    ];
    let running = summarize(&mut running);
    let succeeded = summarize(&mut succeeded);
    let running_event = summarize(&mut running_event);
    let succeeded_event = summarize(&mut succeeded_event);

    let note = format!("{count} triggers paced at {per_second:.0}/s ({why}), {done} succeeded");
    report.push(Figure::new(S, "trigger rate held", achieved, Unit::PerSec).note(note));
    report.push_summary(S, "trigger → RUNNING (MySQL started_at)", running, Some(Target::AtMost(25.0)));
    report.push_summary(S, "trigger → SUCCEEDED (MySQL finished_at)", succeeded, None);
    report.push_summary(S, "trigger → RUNNING event received", running_event, None);
    report.push_summary(S, "trigger → SUCCEEDED event received", succeeded_event, None);
    for (what, summary) in stages {
        report.push(Figure::new(S, format!("{what} p50"), summary.map(|s| s.p50), Unit::Ms));
        report.push(Figure::new(S, format!("{what} p99"), summary.map(|s| s.p99), Unit::Ms));
    }
    report.detail(
        "latency",
        json!({
            "per_second": per_second,
            "triggers": count,
            "succeeded": done,
            "running_ms": running,
            "succeeded_ms": succeeded,
            "running_event_ms": running_event,
            "succeeded_event_ms": succeeded_event,
        }),
    );
    Ok(())
}
