//! When the next attempt of a failed one starts: the task's back-off, pushed later
//! by the retry budget when retries storm.

use ax_domain::task::RetryPolicy;
use ax_domain::Timestamp;

use crate::Shared;

/// `None` when no attempt follows (not retryable, or attempts spent).
pub(crate) fn next_attempt_at(shared: &Shared, task: &str, policy: &RetryPolicy, failed_attempt: u32, retryable: bool, now: Timestamp) -> Option<Timestamp> {
    if !retryable || !policy.allows_another(failed_attempt) {
        return None;
    }
    let wait = policy.jittered_interval_after(failed_attempt) + shared.budget.defer(task);
    Some(now + chrono::TimeDelta::from_std(wait).ok()?)
}
