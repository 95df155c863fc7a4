//! The leader's reaper: ends attempts whose worker went silent (lease expired) or
//! that ran past their timeout plus grace, retrying or failing each by its task's
//! policy with the reason in the audit trail; and notices when Redis lost its
//! state (flush, restart) and pushes every DISPATCHED instance to its worker again.

use std::time::Duration;

use ax_domain::state::{Command, StateKind};
use ax_store::{Overdue, TransitionRequest};

use crate::leader::Term;
use crate::{dispatch, metrics, retry, Shared};

const EVERY: Duration = Duration::from_millis(500);
const BATCH: u32 = 500;

pub(crate) async fn run(shared: Shared, term: Term) -> anyhow::Result<()> {
    if let Err(err) = shared.deps.queues.set_sentinel(&term.fence.epoch.to_string()).await {
        tracing::warn!(error = %err, "cannot mark Redis; a flush will be noticed late");
    }
    loop {
        tokio::select! {
            biased;
            _ = term.token.cancelled() => return Ok(()),
            _ = tokio::time::sleep(EVERY) => {}
        }
        if let Err(err) = pass(&shared, &term).await {
            if matches!(err.downcast_ref::<ax_store::StoreError>(), Some(ax_store::StoreError::Fenced { .. })) {
                ::metrics::counter!(metrics::FENCED_WRITES).increment(1);
                term.token.cancel();
                return Ok(());
            }
            tracing::warn!(error = ?err, "reaper pass failed");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "reaper").increment(1);
        }
    }
}

async fn pass(shared: &Shared, term: &Term) -> anyhow::Result<()> {
    let now = ax_domain::now();
    let expired = shared.deps.store.expired_leases(now, BATCH).await?;
    if !expired.is_empty() {
        let ended = end(shared, term, expired, |o| {
            format!("lease of worker {} expired at {}", o.worker_id.as_deref().unwrap_or("?"), o.lease_expires_at.map(|t| t.to_rfc3339()).unwrap_or_default())
        }, metrics::LEASES_EXPIRED)
        .await?;
        tracing::warn!(count = ended, "attempts ended: their worker's lease expired");
    }
    let grace = chrono::TimeDelta::from_std(shared.config.scheduler.timeout_grace.0)?;
    let late = shared.deps.store.past_deadline(now - grace, BATCH).await?;
    if !late.is_empty() {
        let grace_text = shared.config.scheduler.timeout_grace.to_string();
        let ended = end(shared, term, late, |o| {
            format!("timed out: worker {} did not stop it within {grace_text} after its deadline {}", o.worker_id.as_deref().unwrap_or("?"), o.deadline_at.map(|t| t.to_rfc3339()).unwrap_or_default())
        }, metrics::TIMEOUTS)
        .await?;
        tracing::warn!(count = ended, "attempts ended: past their timeout and grace");
    }
    if !shared.deps.queues.sentinel_present().await.unwrap_or(true) {
        rebuild_redis(shared, term).await?;
    }
    Ok(())
}

/// Expires overdue attempts: next attempt due by the retry policy, or FAILED. An
/// attempt still DISPATCHED never started, and is dispatched again unspent.
async fn end(shared: &Shared, term: &Term, overdue: Vec<Overdue>, reason: impl Fn(&Overdue) -> String, counter: &'static str) -> anyhow::Result<usize> {
    let now = ax_domain::now();
    let mut requests = Vec::with_capacity(overdue.len());
    for o in &overdue {
        let task_id: ax_domain::ids::TaskId = o.task_id.parse()?;
        let definition = shared.tasks.get(&task_id, o.task_version).await?;
        let started = o.state != StateKind::Dispatched.as_str();
        let retry_at = match &definition {
            // Only a started attempt is spent, and only a spent one draws on the retry budget.
            Some(definition) if started => retry::next_attempt_at(shared, &definition.task_name, &definition.execution.retry, o.attempt, true, now),
            _ => None,
        };
        if let Some(definition) = &definition {
            ::metrics::counter!(counter, "task" => definition.task_name.clone()).increment(1);
        }
        requests.push(TransitionRequest {
            instance_id: o.id.parse()?,
            command: Command::Expire { reason: reason(o), retry_at },
            operator: format!("reaper@{}", term.fence.epoch),
            result: None,
        });
    }
    let outcomes = shared.deps.store.transition_fenced(&requests, Some(term.fence)).await?;
    let ended = outcomes.iter().filter(|o| o.is_ok()).count();
    if ended > 0 {
        dispatch::kick(shared).await;
    }
    Ok(ended)
}

/// Redis lost the queues: every DISPATCHED instance goes to its worker's queue
/// again. One that was already taken is refused when its worker reports RUNNING a
/// second time (the guarded write), so nothing runs twice.
async fn rebuild_redis(shared: &Shared, term: &Term) -> anyhow::Result<()> {
    ::metrics::counter!(metrics::REDIS_REBUILDS).increment(1);
    let dispatched = shared.deps.store.dispatched(100_000).await?;
    let mut assignments = Vec::with_capacity(dispatched.len());
    for instance in &dispatched {
        let Some(worker) = instance.state.worker_id() else { continue };
        let Some(definition) = shared.tasks.get(&instance.task_id, instance.task_version).await? else { continue };
        assignments.push((worker.as_str().to_owned(), dispatch::assignment(instance, &definition, ax_domain::now())));
    }
    shared.deps.queues.push(&assignments).await?;
    shared.deps.queues.set_sentinel(&term.fence.epoch.to_string()).await?;
    shared.replan.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.reindex.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.timer_wake.notify_one();
    tracing::warn!(requeued = assignments.len(), "Redis lost its state; queues rebuilt from MySQL");
    Ok(())
}
