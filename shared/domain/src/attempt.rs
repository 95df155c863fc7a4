//! How an attempt ended, read from one transition. The monitor counts these (the
//! timeout rate, lease expiries and dispatch success rate of seed 5.4) and the
//! alert rules judge them, so the reading lives in one place.
//!
//! Timeouts and lease expiries are not states of their own: they are failures
//! whose reason says so. The worker writes "timed out after Ns"; the scheduler's
//! reaper writes a reason naming the lease or the timeout. The SQL of the
//! `timeout_rate` rule (`queries/alerts/attempt_rates.sql`) matches the same words.

use serde::Serialize;

use crate::state::StateKind;

/// The end of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    Succeeded,
    Failed,
    TimedOut,
    LeaseExpired,
    HandedBack,
    Cancelled,
}

impl AttemptEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Succeeded => "succeeded",
            AttemptEnd::Failed => "failed",
            AttemptEnd::TimedOut => "timed_out",
            AttemptEnd::LeaseExpired => "lease_expired",
            AttemptEnd::HandedBack => "handed_back",
            AttemptEnd::Cancelled => "cancelled",
        }
    }

    /// The attempt a transition ends, if it ends one: a move out of DISPATCHED or
    /// RUNNING to anything but RUNNING.
    pub fn of(from: Option<StateKind>, to: StateKind, reason: &str) -> Option<Self> {
        if !matches!(from, Some(StateKind::Dispatched | StateKind::Running)) || to == StateKind::Running {
            return None;
        }
        Some(match to {
            StateKind::Succeeded => AttemptEnd::Succeeded,
            StateKind::Created => AttemptEnd::HandedBack,
            StateKind::Cancelled => AttemptEnd::Cancelled,
            _ if is_timeout(reason) => AttemptEnd::TimedOut,
            _ if is_lease_expiry(reason) => AttemptEnd::LeaseExpired,
            _ => AttemptEnd::Failed,
        })
    }

    pub fn is_failure(self) -> bool {
        matches!(self, AttemptEnd::Failed | AttemptEnd::TimedOut | AttemptEnd::LeaseExpired)
    }
}

/// What became of an instance handed to a worker (seed 5.4, dispatch success rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchEnd {
    /// The worker confirmed it started.
    Started,
    /// The worker gave it back unstarted.
    HandedBack,
    /// The worker never confirmed (lease expired) or refused it.
    Lost,
    Cancelled,
}

impl DispatchEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchEnd::Started => "started",
            DispatchEnd::HandedBack => "handed_back",
            DispatchEnd::Lost => "lost",
            DispatchEnd::Cancelled => "cancelled",
        }
    }

    pub fn of(from: Option<StateKind>, to: StateKind) -> Option<Self> {
        if from != Some(StateKind::Dispatched) {
            return None;
        }
        Some(match to {
            StateKind::Running => DispatchEnd::Started,
            StateKind::Created => DispatchEnd::HandedBack,
            StateKind::Cancelled => DispatchEnd::Cancelled,
            _ => DispatchEnd::Lost,
        })
    }
}

/// A failure reason that says the attempt ran out of time.
pub fn is_timeout(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    reason.contains("timed out") || reason.contains("timeout")
}

/// A failure reason that says the worker's lease ran out.
pub fn is_lease_expiry(reason: &str) -> bool {
    reason.to_ascii_lowercase().contains("lease")
}

#[cfg(test)]
mod tests {
    use super::*;
    use StateKind::*;

    #[test]
    fn attempts_end_when_they_leave_dispatched_or_running() {
        assert_eq!(AttemptEnd::of(Some(Running), Succeeded, ""), Some(AttemptEnd::Succeeded));
        assert_eq!(AttemptEnd::of(Some(Running), Retrying, "timed out after 30s"), Some(AttemptEnd::TimedOut));
        assert_eq!(AttemptEnd::of(Some(Running), Failed, "exit code 1"), Some(AttemptEnd::Failed));
        assert_eq!(AttemptEnd::of(Some(Dispatched), Retrying, "lease expired"), Some(AttemptEnd::LeaseExpired));
        assert_eq!(AttemptEnd::of(Some(Running), Created, "handed back by worker"), Some(AttemptEnd::HandedBack));
        assert_eq!(AttemptEnd::of(Some(Dispatched), Running, ""), None);
        assert_eq!(AttemptEnd::of(None, Created, ""), None);
        assert_eq!(AttemptEnd::of(Some(Retrying), Created, ""), None);
    }

    #[test]
    fn dispatches_end_when_they_leave_dispatched() {
        assert_eq!(DispatchEnd::of(Some(Dispatched), Running), Some(DispatchEnd::Started));
        assert_eq!(DispatchEnd::of(Some(Dispatched), Retrying), Some(DispatchEnd::Lost));
        assert_eq!(DispatchEnd::of(Some(Running), Succeeded), None);
    }
}
