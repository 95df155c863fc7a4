//! Auditing the event stream (seed 6, "replay streams for audits"): read
//! `AX_EVENTS` back from any time, and check it against MySQL's audit trail.
//!
//! # Layout
//! - [`replay`]: an ordered consumer from a start time, filtered by task and instance
//! - [`verify`]: every transition once in each, in order, sequence numbers
//!   contiguous per instance; each gap or mismatch named
//! - [`compare`]: the comparison itself (pure)

pub mod compare;
pub mod replay;
pub mod verify;

pub use compare::{Problem, Side};
pub use replay::{replay, ReplayFilter, StreamEvent};
pub use verify::{verify, VerifyReport};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open stream {stream}: {reason}")]
    Stream { stream: String, reason: String },
    #[error("cannot read stream {stream}: {reason}")]
    Read { stream: String, reason: String },
    #[error("stream {stream} stopped delivering after {delivered} of {expected} messages")]
    Stalled { stream: String, delivered: u64, expected: u64 },
    #[error("reading MySQL's audit trail failed")]
    Store(#[from] ax_store::StoreError),
}
