//! Workers' reports. Any replica answers (queue group); reports arriving together
//! are committed together, so a busy cluster pays one MySQL transaction for many
//! transitions (group commit) instead of one each.

use ax_domain::protocol::{Outcome, Report, ReportReply};
use ax_domain::state::Command;
use ax_store::{Refusal, TransitionRequest};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{dispatch, metrics, Shared};

const MAX_BATCH: usize = 256;
/// Report batches committing at once.
const COMMITS_IN_FLIGHT: usize = 4;
/// A batch this large commits beside one in flight instead of waiting for it.
const EAGER_BATCH: usize = 32;
/// Commits in flight before a new batch waits for one of them instead of starting.
const GATHER_BESIDE: usize = 2;
const QUEUE_GROUP: &str = "ax-scheduler";

pub(crate) async fn subscribe(shared: &Shared) -> Result<async_nats::Subscriber, async_nats::SubscribeError> {
    shared.deps.bus.client.queue_subscribe(shared.deps.bus.names.report(), QUEUE_GROUP.to_owned()).await
}

struct Pending {
    report: Report,
    reply_to: Option<async_nats::Subject>,
}

pub(crate) async fn run(shared: Shared, mut reports: async_nats::Subscriber, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (pending_tx, pending_rx) = mpsc::channel::<Pending>(MAX_BATCH * 16);
    let writer = tokio::spawn(write_batches(shared.clone(), pending_rx));
    loop {
        let message = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            message = reports.next() => match message { Some(m) => m, None => break },
        };
        match serde_json::from_slice::<Report>(&message.payload) {
            Ok(report) => {
                if pending_tx.send(Pending { report, reply_to: message.reply }).await.is_err() {
                    break;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "malformed report refused");
                ::metrics::counter!(metrics::REPORTS_REJECTED, "reason" => "malformed").increment(1);
                if let Some(reply) = message.reply {
                    let answer = ReportReply::Rejected { reason: format!("malformed report: {err}") };
                    let _ = shared.deps.bus.client.publish(reply, serde_json::to_vec(&answer)?.into()).await;
                }
            }
        }
    }
    drop(pending_tx);
    let _ = writer.await;
    Ok(())
}

/// Takes whatever reports are waiting (up to a batch), commits them together, answers
/// each. A batch starts committing at once while fewer than [`GATHER_BESIDE`]
/// commits are in flight; otherwise it keeps gathering until one finishes, unless it
/// is already large, and at most [`COMMITS_IN_FLIGHT`] commit at once. Idle, a report waits for nothing;
/// busy, commits stay large, because MySQL's CPU per transition falls with the
/// batch. Reports about one instance cannot race: a worker sends the next only
/// after the answer to the last.
async fn write_batches(shared: Shared, mut pending_rx: mpsc::Receiver<Pending>) {
    let mut commits = tokio::task::JoinSet::new();
    let mut batch: Vec<Pending> = Vec::with_capacity(MAX_BATCH);
    let mut open = true;
    while open || !batch.is_empty() {
        if batch.is_empty() && pending_rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            break;
        }
        while open && commits.len() >= GATHER_BESIDE && (batch.len() < EAGER_BATCH || commits.len() >= COMMITS_IN_FLIGHT) && batch.len() < MAX_BATCH {
            tokio::select! {
                biased;
                Some(_) = commits.join_next() => {
                    if commits.len() < COMMITS_IN_FLIGHT {
                        break;
                    }
                }
                received = { let room = MAX_BATCH - batch.len(); pending_rx.recv_many(&mut batch, room) } => open = received > 0,
            }
        }
        while commits.len() >= COMMITS_IN_FLIGHT {
            commits.join_next().await;
        }
        let taken = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        let shared = shared.clone();
        commits.spawn(async move {
            let replies = commit(&shared, &taken).await;
            let client = &shared.deps.bus.client;
            for (pending, reply) in taken.into_iter().zip(replies) {
                if let Some(reply_to) = pending.reply_to {
                    let body = serde_json::to_vec(&reply).expect("replies always serialize");
                    let _ = client.publish(reply_to, body.into()).await;
                }
            }
        });
    }
    while commits.join_next().await.is_some() {}
}

async fn commit(shared: &Shared, batch: &[Pending]) -> Vec<ReportReply> {
    let now = ax_domain::now();
    let lease = chrono::TimeDelta::from_std(shared.config.scheduler.lease.0).unwrap_or(chrono::TimeDelta::MAX);
    let mut requests = Vec::with_capacity(batch.len());
    for Pending { report, .. } in batch {
        let worker_id = report.worker_id.clone();
        let attempt = report.attempt;
        let (command, result) = match &report.outcome {
            Outcome::Running => {
                let timeout = match shared.tasks.get_by_name(&report.task, report.task_version).await {
                    Ok(Some(definition)) => chrono::TimeDelta::seconds(definition.execution.timeout as i64),
                    _ => chrono::TimeDelta::seconds(report.timeout_sec as i64),
                };
                (Command::Start { attempt, worker_id, lease_expires_at: now + lease, deadline_at: now + timeout }, None)
            }
            Outcome::Succeeded { result } => (Command::Succeed { attempt, worker_id }, result.clone()),
            Outcome::Failed { reason, retryable } => {
                let retry_at = retry_at(shared, report, *retryable, now).await;
                (Command::Fail { attempt, worker_id, reason: reason.clone(), retry_at }, None)
            }
            Outcome::HandedBack => (Command::HandBack { attempt, worker_id }, None),
        };
        requests.push(TransitionRequest {
            instance_id: report.instance_id.clone(),
            command,
            operator: format!("worker:{}", report.worker_id),
            result,
        });
    }
    ::metrics::histogram!(metrics::TRANSITION_BATCH).record(requests.len() as f64);
    let outcomes = match shared.deps.store.transition(&requests).await {
        Ok(outcomes) => outcomes,
        Err(err) => {
            tracing::warn!(error = %err, count = requests.len(), "reports could not be committed");
            return batch.iter().map(|_| ReportReply::Unavailable { reason: err.to_string() }).collect();
        }
    };
    let mut slot_freed = false;
    let mut freed_tasks: Vec<(ax_domain::ids::TaskId, u32)> = Vec::new();
    let replies = outcomes
        .into_iter()
        .zip(batch)
        .map(|(outcome, pending)| {
            let label = match pending.report.outcome {
                Outcome::Running => "running",
                Outcome::Succeeded { .. } => "succeeded",
                Outcome::Failed { .. } => "failed",
                Outcome::HandedBack => "handed_back",
            };
            match outcome {
                Ok(applied) => {
                    ::metrics::counter!(metrics::REPORTS, "outcome" => label).increment(1);
                    slot_freed |= !matches!(pending.report.outcome, Outcome::Running);
                    if matches!(pending.report.outcome, Outcome::HandedBack) {
                        shared.registry.mark_leaving(pending.report.worker_id.as_str());
                    }
                    if applied.instance.state.kind().is_final() {
                        freed_tasks.push((applied.instance.task_id.clone(), applied.instance.task_version));
                    }
                    tracing::debug!(instance_id = %applied.instance.id, state = %applied.instance.state.kind(), "report applied");
                    ReportReply::Accepted
                }
                Err(refusal) => {
                    let reason = match &refusal {
                        Refusal::NotFound => "not_found",
                        Refusal::Transition(ax_domain::state::TransitionError::StaleAttempt { .. }) => "stale_attempt",
                        Refusal::Transition(ax_domain::state::TransitionError::NotHolder { .. }) => "not_holder",
                        Refusal::Transition(_) => "illegal",
                    };
                    ::metrics::counter!(metrics::REPORTS_REJECTED, "reason" => reason).increment(1);
                    tracing::info!(instance_id = %pending.report.instance_id, attempt = pending.report.attempt, worker_id = %pending.report.worker_id, reason = %refusal, "report rejected");
                    ReportReply::Rejected { reason: refusal.to_string() }
                }
            }
        })
        .collect();
    release_freed_slots(shared, freed_tasks).await;
    if slot_freed {
        dispatch::kick(shared).await;
    }
    replies
}

/// The next attempt's due time, or `None` when no attempt is left.
async fn retry_at(shared: &Shared, report: &Report, retryable: bool, now: ax_domain::Timestamp) -> Option<ax_domain::Timestamp> {
    let definition = match shared.tasks.get_by_name(&report.task, report.task_version).await {
        Ok(Some(d)) => d,
        Ok(None) => return None,
        Err(err) => {
            // Without the policy, fail safe: no retry rather than an unbounded one.
            tracing::warn!(error = %err, task = %report.task, "cannot read retry policy; not retrying");
            return None;
        }
    };
    crate::retry::next_attempt_at(shared, &report.task, &definition.execution.retry, report.attempt, retryable, now)
}

/// An instance of a task with `max_running_instances` ended: the oldest waiting
/// ones take the freed slots.
async fn release_freed_slots(shared: &Shared, mut freed: Vec<(ax_domain::ids::TaskId, u32)>) {
    freed.sort();
    freed.dedup_by(|a, b| a.0 == b.0);
    for (task_id, version) in freed {
        let limited = match shared.tasks.get(&task_id, version).await {
            Ok(Some(definition)) => definition.concurrency.max_running_instances.is_some(),
            _ => true, // unsure: a release with nothing to release is harmless
        };
        if !limited {
            continue;
        }
        if let Err(err) = shared.deps.store.release_waiting(&task_id).await {
            tracing::warn!(task_id = %task_id, error = %err, "releasing waiting instances failed; the sweep will retry");
        }
    }
}
