//! What the monitor reads besides events: gauges of the projection and the inputs
//! of its alert rules.

use std::collections::HashMap;

use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::Timestamp;

use crate::error::{Context, StoreError};
use crate::Store;

/// One task's numbers over a rule's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptRates {
    pub attempts: u64,
    pub timeouts: u64,
    pub succeeded: u64,
    pub failed: u64,
}

/// One task's instances that are ready to run but waited past the cutoff.
#[derive(Debug, Clone, PartialEq)]
pub struct Backlog {
    pub task: String,
    pub count: u64,
    pub oldest_due: Timestamp,
}

/// A finished instance, for judging streaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub instance_id: InstanceId,
    pub state: StateKind,
    pub reason: String,
    pub trace_id: String,
    pub finished_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct RatesRow {
    task_name: String,
    attempts: Option<i64>,
    timeouts: Option<i64>,
    succeeded: Option<i64>,
    failed: Option<i64>,
}

fn corrupt(reason: String) -> StoreError {
    StoreError::Corrupt { what: "instances", reason }
}

impl Store {
    /// Unfinished instances by task and state.
    pub async fn instance_state_counts(&self) -> Result<Vec<(String, StateKind, u64)>, StoreError> {
        let rows: Vec<(String, String, i64)> =
            sqlx::query_as(include_str!("../queries/monitor/state_counts.sql")).fetch_all(&self.pool).await.at("count instances by state")?;
        rows.into_iter()
            .map(|(task, state, n)| Ok((task, StateKind::parse(&state).ok_or_else(|| corrupt(format!("state {state}")))?, n.max(0) as u64)))
            .collect()
    }

    /// Per task, instances ready to run (CREATED and due) since before `cutoff`.
    pub async fn backlog(&self, cutoff: Timestamp) -> Result<Vec<Backlog>, StoreError> {
        let rows: Vec<(String, i64, Timestamp)> =
            sqlx::query_as(include_str!("../queries/monitor/backlog.sql")).bind(cutoff).fetch_all(&self.pool).await.at("measure backlog")?;
        Ok(rows.into_iter().map(|(task, count, oldest_due)| Backlog { task, count: count.max(0) as u64, oldest_due }).collect())
    }

    /// A task's latest finished successes and failures, newest first.
    pub async fn latest_outcomes(&self, task: &str, limit: u32) -> Result<Vec<Outcome>, StoreError> {
        let rows: Vec<(String, String, String, String, Timestamp)> = sqlx::query_as(include_str!("../queries/monitor/latest_outcomes.sql"))
            .bind(task)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .at("read latest outcomes")?;
        rows.into_iter()
            .map(|(id, state, reason, trace_id, finished_at)| {
                Ok(Outcome {
                    instance_id: id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
                    state: StateKind::parse(&state).ok_or_else(|| corrupt(format!("state {state}")))?,
                    reason,
                    trace_id,
                    finished_at,
                })
            })
            .collect()
    }

    /// Seconds the latest successful runs of a task took, newest first, with their instance.
    pub async fn latest_durations(&self, task: &str, limit: u32) -> Result<Vec<(String, f64)>, StoreError> {
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(include_str!("../queries/monitor/latest_durations.sql"))
            .bind(task)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .at("read latest durations")?;
        Ok(rows.into_iter().filter_map(|(id, micros)| micros.map(|m| (id, m.max(0) as f64 / 1e6))).collect())
    }

    /// Per task since `since`: attempts ended, timeouts, successes and failures.
    pub async fn attempt_rates(&self, since: Timestamp) -> Result<HashMap<String, AttemptRates>, StoreError> {
        let rows: Vec<RatesRow> =
            sqlx::query_as(include_str!("../queries/monitor/attempt_rates.sql")).bind(since).fetch_all(&self.pool).await.at("read attempt rates")?;
        let n = |v: Option<i64>| v.unwrap_or(0).max(0) as u64;
        Ok(rows
            .into_iter()
            .map(|r| (r.task_name, AttemptRates { attempts: n(r.attempts), timeouts: n(r.timeouts), succeeded: n(r.succeeded), failed: n(r.failed) }))
            .collect())
    }

    /// Each task's owner, for notifications and reports.
    pub async fn task_owners(&self) -> Result<HashMap<String, String>, StoreError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as(include_str!("../queries/monitor/task_owners.sql")).fetch_all(&self.pool).await.at("read task owners")?;
        Ok(rows.into_iter().collect())
    }

    /// Seconds an instance's last attempt ran; `None` if it never started.
    pub async fn instance_run_seconds(&self, id: &InstanceId) -> Result<Option<f64>, StoreError> {
        let micros: Option<Option<i64>> = sqlx::query_scalar(include_str!("../queries/monitor/instance_run.sql"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .at("read run duration")?;
        Ok(micros.flatten().map(|m| m.max(0) as f64 / 1e6))
    }

    /// The instance a trace id belongs to.
    pub async fn instance_of_trace(&self, trace_id: &str) -> Result<Option<InstanceId>, StoreError> {
        let id: Option<String> = sqlx::query_scalar(include_str!("../queries/monitor/trace.sql"))
            .bind(trace_id)
            .fetch_optional(&self.pool)
            .await
            .at("find instance of trace")?;
        id.map(|id| id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))).transpose()
    }
}
