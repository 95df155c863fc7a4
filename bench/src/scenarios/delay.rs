//! Scenario 3, delay precision: 200 instances due 5 s after their trigger
//! (`delay_sec: 5`), triggers spaced 20 ms apart; how late each one started
//! (RUNNING committed, `started_at − due_at`, both stamped by AX in MySQL).

use std::time::Duration;

use ax_domain::Timestamp;
use bytes::Bytes;
use serde_json::json;

use crate::db;
use crate::report::{Report, Target};
use crate::scenarios::stage::Stage;
use crate::stats::summarize;
use crate::triggers;

pub const SCENARIO: &str = "3 delay";
const COUNT: usize = 200;

/// # Errors
/// A service failed under the harness.
pub async fn run(stage: &Stage, report: &mut Report) -> anyhow::Result<()> {
    let env = &stage.env;
    let pool = env.store.pool();
    let task = &stage.delay_task;
    triggers::paced(&env.bus, "dly", "dly-", COUNT, 50.0, Bytes::from_static(br#"{"delay_sec": 5}"#)).await?;
    let done = db::wait_for_state(pool, task.id.as_str(), "SUCCEEDED", COUNT as u64, Duration::from_secs(60)).await?;

    let rows: Vec<(Timestamp, Option<Timestamp>, Option<Timestamp>)> = sqlx::query_as(
        "SELECT i.due_at, i.started_at, t.created_at FROM instances i \
         LEFT JOIN instance_transitions t ON t.instance_id = i.id AND t.to_state = 'DISPATCHED' \
         WHERE i.task_id = ?",
    )
    .bind(task.id.as_str())
    .fetch_all(pool)
    .await?;
    let ms = |due: Timestamp, at: Timestamp| (at - due).as_seconds_f64() * 1000.0;
    let mut started: Vec<f64> = rows.iter().filter_map(|(due, s, _)| s.map(|s| ms(*due, s))).collect();
    let mut dispatched: Vec<f64> = rows.iter().filter_map(|(due, _, d)| d.map(|d| ms(*due, d))).collect();
    let started = summarize(&mut started);
    let dispatched = summarize(&mut dispatched);
    report.push_summary(SCENARIO, "start − due (RUNNING committed)", started, Some(Target::AtMost(20.0)));
    report.detail(
        "delay",
        json!({
            "instances": COUNT,
            "succeeded": done,
            "start_minus_due_ms": started,
            "dispatched_minus_due_ms": dispatched,
        }),
    );
    Ok(())
}
