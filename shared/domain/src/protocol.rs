//! What workers and schedulers say to each other. Workers talk only to NATS and
//! Redis: they announce themselves with heartbeats, pop [`Assignment`]s from their
//! Redis queue, and send [`Report`]s as NATS requests that a scheduler answers once
//! the report is committed (or refused) in MySQL.

use serde::{Deserialize, Serialize};

use crate::ids::{InstanceId, TraceId, WorkerId};
use crate::task::Priority;
use crate::Timestamp;

/// Published by every worker every heartbeat interval; a worker is alive while its
/// last heartbeat is younger than the lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub worker_id: WorkerId,
    pub group: String,
    pub tags: Vec<String>,
    pub version: String,
    pub handlers: Vec<String>,
    pub cpu_cores: u32,
    pub running: u32,
    pub max_running: u32,
    /// Assignments it takes ahead of a free slot: the dispatcher gives it up to
    /// `max_running + prefetch` at once.
    #[serde(default)]
    pub prefetch: u32,
    pub memory_used_bytes: u64,
    pub sent_at: Timestamp,
    /// The worker is shutting down: dispatch nothing more to it.
    #[serde(default)]
    pub leaving: bool,
}

/// One attempt of one instance, handed to one worker through its Redis queue.
/// Carries everything the worker needs, because workers cannot read MySQL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub instance_id: InstanceId,
    pub task: String,
    pub task_version: u32,
    pub attempt: u32,
    pub handler: String,
    pub config: serde_json::Value,
    pub params: serde_json::Value,
    pub payload_version: Option<u32>,
    pub timeout_sec: u64,
    pub priority: Priority,
    pub trace_id: TraceId,
    pub dispatched_at: Timestamp,
    /// The task allows one running instance: the worker also takes a per-task guard.
    #[serde(default)]
    pub exclusive: bool,
    /// Set when this instance is one shard of a sharded or broadcast firing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shard::ShardOf>,
}

/// How an attempt went, from the worker's side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Running,
    Succeeded {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
    },
    Failed {
        reason: String,
        /// `false` when the handler said not to retry (`TaskError::Abort`).
        retryable: bool,
    },
    /// Not started and given back (the worker is shutting down).
    HandedBack,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub instance_id: InstanceId,
    /// From the assignment; lets the scheduler find the retry policy without a read.
    pub task: String,
    pub task_version: u32,
    pub attempt: u32,
    pub worker_id: WorkerId,
    /// The attempt's timeout as the worker was told (used if the definition is unreadable).
    #[serde(default)]
    pub timeout_sec: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Sent by a worker every heartbeat (request/reply, answered by one scheduler):
/// extends the leases of the attempts it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRenewal {
    pub worker_id: WorkerId,
    /// (instance id, attempt) of every attempt the worker holds.
    pub held: Vec<(InstanceId, u32)>,
}

/// The answer to a [`LeaseRenewal`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRenewed {
    pub until: Timestamp,
    /// Attempts the worker must stop: MySQL says it no longer holds them (expired,
    /// cancelled, taken over).
    pub lost: Vec<InstanceId>,
}

/// A handler's progress, published by the worker; stored on the instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub instance_id: InstanceId,
    pub attempt: u32,
    pub worker_id: WorkerId,
    pub percent: u8,
    pub message: String,
}

/// The scheduler's answer to a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum ReportReply {
    /// Committed.
    Accepted,
    /// The worker no longer has the right to move this instance; it must stop the
    /// attempt and not retry the report.
    Rejected { reason: String },
    /// Could not be decided now (e.g. MySQL unavailable); try again.
    Unavailable { reason: String },
}
