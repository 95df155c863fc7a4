//! The AX domain: plain types and pure rules, no I/O.
//!
//! # Layout
//! - [`ids`]: prefixed, sortable identifiers (`tsk_…`, `ins_…`, `wkr_…`, `evt_…`)
//! - [`task`]: the task definition of seed 3.1, its validation and JSON Schema
//! - [`state`]: the instance state machine; `apply` is the only way to move an instance
//! - [`event`]: the versioned CBOR event envelope published on `AX_EVENTS`
//! - [`trigger`]: trigger requests accepted on `ax.trigger.<task>` and over HTTP
//! - [`protocol`]: the messages workers and schedulers exchange
//! - [`subjects`]: every NATS subject and Redis key name, built in one place
//! - [`shard`]: which shard of a sharded or broadcast firing an instance is
//! - [`retry`]: back-off arithmetic shared by retries and reconnect loops
//! - [`log`]: the batches of task log lines workers publish on `ax.log.<task>.<instance>`
//! - [`attempt`]: how an attempt ended (timeout, lease expiry …), read from a transition
//! - [`alert`]: alert rules (P0/P1/P2) and notification channels
//! - [`health`]: the task health report (seed 6)
//! - [`period`]: `--since` / `?since=` arguments (RFC 3339, dates, ages)

pub mod alert;
pub mod attempt;
pub mod cron_expr;
pub mod event;
pub mod health;
pub mod ids;
pub mod log;
pub mod period;
pub mod protocol;
pub mod retry;
pub mod shard;
pub mod state;
pub mod subjects;
pub mod task;
pub mod trigger;

/// Every time in AX is UTC with microsecond precision, as MySQL `DATETIME(6)` stores it.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// The current time truncated to microseconds, so a value read back from MySQL compares equal.
pub fn now() -> Timestamp {
    truncate_micros(chrono::Utc::now())
}

/// Drops sub-microsecond precision.
pub fn truncate_micros(t: Timestamp) -> Timestamp {
    use chrono::{DurationRound, TimeDelta};
    t.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(t)
}
