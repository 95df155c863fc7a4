//! Instances: created once per trigger id, moved only by guarded transitions.

mod create;
mod query;
mod release;
mod shards;
mod transition;

use ax_domain::ids::{InstanceId, TaskId, TraceId, WorkerId};
use ax_domain::shard::ShardOf;
use ax_domain::state::{Created, Dispatched, Finished, InstanceState, Retrying, Running, Sharded, StateKind, Waiting};
use ax_domain::task::{Priority, TriggerKind};
use ax_domain::Timestamp;
use sqlx::FromRow;

pub use create::{CreateOutcome, NewInstance};
pub use query::{DispatchView, FutureDue, InstanceFilter, Overdue, TransitionRecord};
pub use transition::{Applied, Refusal, TransitionRequest};

use crate::error::StoreError;

/// An instance as stored, with its state as a typed value.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    pub id: InstanceId,
    pub created_at: Timestamp,
    pub task_id: TaskId,
    pub task_name: String,
    pub task_version: u32,
    pub state: InstanceState,
    pub attempt: u32,
    /// Sequence number of the last event this instance emitted.
    pub seq: u32,
    pub trigger_type: TriggerKind,
    pub trigger_id: String,
    pub trace_id: TraceId,
    pub params: serde_json::Value,
    pub payload_version: Option<u32>,
    pub priority: Priority,
    pub due_at: Timestamp,
    /// The worker that ran the last attempt, kept after it finished.
    pub last_worker_id: Option<WorkerId>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub reason: String,
    pub result: Option<serde_json::Value>,
    /// The handler's last progress report: percent and message.
    pub progress: Option<(u8, String)>,
    /// The instance this one reruns, if it is a manual rerun.
    pub rerun_of: Option<InstanceId>,
    /// Set when this instance is one shard of a sharded or broadcast firing.
    pub shard: Option<ShardOf>,
    /// Set on a firing that fanned out: how its shards are doing.
    pub shards: Option<ShardCounts>,
    pub updated_at: Timestamp,
}

/// A fanned-out firing's shards, as counted under its row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShardCounts {
    pub total: u32,
    /// Not yet in a final state.
    pub open: u32,
    pub failed: u32,
    pub cancelled: u32,
}

/// The columns of `instances`; [`InstanceRecord::try_from`] is the one place that
/// knows which are meaningful in which state.
#[derive(FromRow)]
pub(crate) struct InstanceRow {
    id: String,
    created_at: Timestamp,
    task_id: String,
    task_name: String,
    task_version: u32,
    state: String,
    attempt: u32,
    seq: u32,
    trigger_type: String,
    trigger_id: String,
    trace_id: String,
    params: String,
    payload_version: Option<u32>,
    priority: u8,
    due_at: Timestamp,
    worker_id: Option<String>,
    lease_expires_at: Option<Timestamp>,
    deadline_at: Option<Timestamp>,
    progress_percent: Option<u8>,
    progress_message: Option<String>,
    rerun_of: Option<String>,
    parent_id: Option<String>,
    shard_index: Option<u32>,
    shard_total: Option<u32>,
    shards_open: Option<u32>,
    shards_failed: u32,
    shards_cancelled: u32,
    started_at: Option<Timestamp>,
    finished_at: Option<Timestamp>,
    reason: String,
    result: Option<String>,
    updated_at: Timestamp,
}

pub(crate) const INSTANCE_COLUMNS: &str = "id, created_at, task_id, task_name, task_version, state, attempt, seq, \
     trigger_type, trigger_id, trace_id, params, payload_version, priority, due_at, worker_id, lease_expires_at, \
     deadline_at, progress_percent, progress_message, rerun_of, parent_id, shard_index, shard_total, shards_open, \
     shards_failed, shards_cancelled, started_at, finished_at, reason, result, updated_at";

impl TryFrom<InstanceRow> for InstanceRecord {
    type Error = StoreError;

    fn try_from(row: InstanceRow) -> Result<Self, StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt { what: "instances", reason: format!("{}: {reason}", row.id) };
        let kind = StateKind::parse(&row.state).ok_or_else(|| corrupt(format!("unknown state {}", row.state)))?;
        let worker_id = row
            .worker_id
            .as_deref()
            .map(|w| w.parse::<WorkerId>())
            .transpose()
            .map_err(|e| corrupt(e.to_string()))?;
        let held = |what: &str| -> Result<(WorkerId, Timestamp), StoreError> {
            match (&worker_id, row.lease_expires_at) {
                (Some(w), Some(lease)) => Ok((w.clone(), lease)),
                _ => Err(corrupt(format!("{what} without worker or lease"))),
            }
        };
        let state = match kind {
            StateKind::Waiting => InstanceState::Waiting(Waiting),
            StateKind::Created => InstanceState::Created(Created),
            StateKind::Dispatched => {
                let (worker_id, lease_expires_at) = held("DISPATCHED")?;
                InstanceState::Dispatched(Dispatched { worker_id, lease_expires_at })
            }
            StateKind::Running => {
                let (worker_id, lease_expires_at) = held("RUNNING")?;
                let started_at = row.started_at.ok_or_else(|| corrupt("RUNNING without started_at".into()))?;
                let deadline_at = row.deadline_at.unwrap_or(lease_expires_at);
                InstanceState::Running(Running { worker_id, lease_expires_at, started_at, deadline_at })
            }
            StateKind::Retrying => InstanceState::Retrying(Retrying { next_attempt_at: row.due_at }),
            StateKind::Sharded => {
                let total = row.shard_total.ok_or_else(|| corrupt("SHARDED without shard_total".into()))?;
                InstanceState::Sharded(Sharded { total })
            }
            kind => InstanceState::Finished(Finished { kind, finished_at: row.finished_at.unwrap_or(row.updated_at) }),
        };
        Ok(Self {
            id: row.id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
            created_at: row.created_at,
            task_id: row.task_id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
            task_name: row.task_name,
            task_version: row.task_version,
            state,
            attempt: row.attempt,
            seq: row.seq,
            trigger_type: TriggerKind::parse(&row.trigger_type).ok_or_else(|| corrupt(format!("trigger type {}", row.trigger_type)))?,
            trigger_id: row.trigger_id,
            trace_id: row.trace_id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
            params: serde_json::from_str(&row.params).map_err(|e| corrupt(format!("params: {e}")))?,
            payload_version: row.payload_version,
            priority: Priority::from_rank(row.priority).ok_or_else(|| corrupt(format!("priority {}", row.priority)))?,
            due_at: row.due_at,
            last_worker_id: worker_id,
            started_at: row.started_at,
            finished_at: row.finished_at,
            reason: row.reason,
            result: row.result.as_deref().map(serde_json::from_str).transpose().map_err(|e| corrupt(format!("result: {e}")))?,
            progress: row.progress_percent.map(|p| (p, row.progress_message.clone().unwrap_or_default())),
            rerun_of: row.rerun_of.as_deref().and_then(|r| r.parse().ok()),
            shard: match (row.parent_id.as_deref(), row.shard_index, row.shard_total) {
                (Some(parent), Some(index), Some(total)) => Some(ShardOf {
                    parent_id: parent.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(format!("parent_id: {e}")))?,
                    index,
                    total,
                }),
                (None, _, _) => None,
                _ => return Err(corrupt("shard without index or total".into())),
            },
            shards: match (row.parent_id.as_deref(), row.shard_total, row.shards_open) {
                (None, Some(total), Some(open)) => {
                    Some(ShardCounts { total, open, failed: row.shards_failed, cancelled: row.shards_cancelled })
                }
                _ => None,
            },
            updated_at: row.updated_at,
        })
    }
}
