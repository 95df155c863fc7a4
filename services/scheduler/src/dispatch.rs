//! The dispatcher: due CREATED instances go to the least-loaded eligible worker.
//!
//! A sharded or broadcast firing is not dispatched: it fans out into shard
//! instances (created in the same commit), and each shard goes to a worker that
//! holds none of its siblings while one has room.
//!
//! One pass: read due instances (urgent first, then oldest due), choose a worker
//! for each from the registry and the load MySQL reports, commit all the
//! CREATED → DISPATCHED transitions in one transaction, then push the assignments
//! to the workers' Redis queues. The push happens after the commit, so a worker
//! never runs something MySQL does not say it holds; if the push fails, the
//! instance's lease runs out and it is recovered.
//!
//! An instance no worker can take stays CREATED (backlog) and goes out as soon as
//! one appears: a heartbeat from a new worker wakes the dispatcher.
//!
//! A cron fire committed ahead of its time is judged when a pass reads it: if its
//! task was disabled at or before the fire time, it is cancelled, not dispatched.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ax_domain::ids::{InstanceId, TaskId};
use ax_domain::protocol::Assignment;
use ax_domain::state::Command;
use ax_domain::task::{DispatchStrategy, ShardPlan, TriggerKind};
use ax_store::{InstanceRecord, TransitionRequest};
use futures::{FutureExt, StreamExt};

use crate::leader::Term;
use crate::registry::{eligible, WorkerEntry};
use crate::{metrics, Shared};

const BATCH: u32 = 512;
/// The fewest due instances a pass reads: firings that fan out and instances no
/// live worker can take still need to be seen while every slot is busy.
const MIN_READ: u32 = 32;
/// The least time between two dispatch passes started by wake-ups.
const GATHER: Duration = Duration::from_millis(2);
/// How often waiting instances are checked for slots without a wake-up.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Tells the leader's dispatcher, and its timer (which indexes due times of new
/// instances), that work may be ready: in the process when they run here, over
/// NATS when another replica leads. A kick lost in a change of leader costs
/// nothing: a new term starts with a dispatch pass and a reindex.
pub(crate) async fn kick(shared: &Shared) {
    shared.dispatch_wake.notify_one();
    shared.due_changed.notify_one();
    if !shared.dispatching_here.load(Ordering::Acquire) {
        let _ = shared.deps.bus.client.publish(shared.deps.bus.names.dispatch_kick(), bytes::Bytes::new()).await;
    }
}

/// Clears [`Shared::dispatching_here`] however the dispatcher ends.
struct DispatchingHere<'a>(&'a AtomicBool);

impl Drop for DispatchingHere<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Dispatches during one leadership term.
pub(crate) async fn run(shared: Shared, term: Term) -> anyhow::Result<()> {
    let interval = shared.config.scheduler.dispatch_interval.0;
    let mut kicks = shared.deps.bus.client.subscribe(shared.deps.bus.names.dispatch_kick()).await?;
    shared.dispatching_here.store(true, Ordering::Release);
    let _here = DispatchingHere(&shared.dispatching_here);
    let mut last_sweep = tokio::time::Instant::now();
    let mut last_pass = tokio::time::Instant::now();
    // A term starts with a pass: kicks sent while no dispatcher listened are lost.
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            tokio::select! {
                biased;
                _ = term.token.cancelled() => break,
                _ = shared.dispatch_wake.notified() => {}
                Some(_) = kicks.next() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
        // Every report commit that frees a slot kicks: right after a pass, wait a
        // moment so a burst of kicks makes one larger pass.
        if let Some(wait) = GATHER.checked_sub(last_pass.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        while let Some(Some(_)) = kicks.next().now_or_never() {}
        if last_sweep.elapsed() >= SWEEP_EVERY {
            release_waiting_everywhere(&shared).await;
            last_sweep = tokio::time::Instant::now();
        }
        last_pass = tokio::time::Instant::now();
        // Drain: keep passing while passes are full.
        loop {
            let started = std::time::Instant::now();
            let passed = pass(&shared, &term).await;
            if let Ok(done) = &passed
                && done.looked > 0
            {
                ::metrics::histogram!(metrics::DISPATCH_PASS).record(started.elapsed().as_secs_f64());
            }
            match passed {
                // Fanned-out firings left shards due now.
                Ok(done) if done.fanned_out > 0 || done.cancelled > 0 || (done.moved > 0 && done.looked >= BATCH as usize) => continue,
                Ok(_) => break,
                Err(err) if is_fenced(&err) => {
                    ::metrics::counter!(metrics::FENCED_WRITES).increment(1);
                    term.token.cancel();
                    return Ok(());
                }
                Err(err) => {
                    tracing::warn!(error = ?err, "dispatch pass failed");
                    ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "dispatch").increment(1);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
            }
        }
    }
    Ok(())
}

fn is_fenced(err: &anyhow::Error) -> bool {
    matches!(err.downcast_ref::<ax_store::StoreError>(), Some(ax_store::StoreError::Fenced { .. }))
}

/// Waiting instances whose slot was freed where no release followed (a crash
/// between the two) are released here.
async fn release_waiting_everywhere(shared: &Shared) {
    match shared.deps.store.tasks_with_waiting().await {
        Ok(tasks) => {
            for task_id in tasks {
                if let Err(err) = shared.deps.store.release_waiting(&task_id).await {
                    tracing::warn!(task_id = %task_id, error = %err, "releasing waiting instances failed");
                }
            }
        }
        Err(err) => tracing::warn!(error = %err, "listing tasks with waiting instances failed"),
    }
}

/// What one pass did: the drain loop goes on only while passes are full and move
/// something, so a backlog no worker can take does not spin the dispatcher.
#[derive(Debug, Default, Clone, Copy)]
struct PassResult {
    looked: usize,
    moved: usize,
    fanned_out: usize,
    /// Cron fires of disabled tasks: more may wait behind them.
    cancelled: usize,
}

/// One dispatch pass.
async fn pass(shared: &Shared, term: &Term) -> anyhow::Result<PassResult> {
    let store = &shared.deps.store;
    let now = ax_domain::now();
    let view = store.dispatch_view(now, BATCH).await?;
    release_due_retries(shared, term, view.due_retries).await?;

    let workers = shared.registry.alive_workers(now);
    let mut load: HashMap<String, u32> = view.held.into_iter().collect();
    // Read only as many due instances as the pool could take (plus some, for ones
    // that only certain workers may run): a backlog of thousands behind 16 free
    // slots costs 16-odd rows a pass, not a full batch.
    let free: u32 = workers.iter().map(|w| capacity(w).saturating_sub(load.get(w.heartbeat.worker_id.as_str()).copied().unwrap_or(0))).sum();
    let due = store.due_instances(now, free.saturating_mul(2).clamp(MIN_READ, BATCH)).await?;
    let looked = due.len();
    let (due, cancelled) = cancel_fires_of_disabled_tasks(shared, term, due).await?;
    if due.is_empty() {
        return Ok(PassResult { looked, cancelled, ..PassResult::default() });
    }
    let firings: Vec<&InstanceId> = due.iter().filter_map(|i| i.shard.as_ref().map(|s| &s.parent_id)).collect();
    // Per firing, the workers holding one of its shards: the others are preferred.
    let mut shard_holders: HashMap<InstanceId, HashSet<String>> = store.shard_holders(&firings).await?;
    let lease = chrono::TimeDelta::from_std(shared.config.scheduler.lease.0)?;
    let operator = format!("scheduler@{}", term.fence.epoch);

    let mut fan_outs = Vec::new();
    let mut requests = Vec::new();
    let mut planned = Vec::new();
    for instance in &due {
        let Some(definition) = shared.tasks.get(&instance.task_id, instance.task_version).await? else {
            tracing::error!(instance_id = %instance.id, task = %instance.task_name, version = instance.task_version, "instance names a task version that does not exist");
            continue;
        };
        let eligible_workers: Vec<&WorkerEntry> = workers.iter().filter(|w| eligible(&w.heartbeat, &definition)).collect();
        if instance.shard.is_none()
            && let Some(plan) = definition.dispatch.shard_plan()
        {
            // The firing itself never runs: it splits into shard instances.
            let total = match plan {
                ShardPlan::Fixed(total) => total,
                ShardPlan::PerWorker => eligible_workers.len() as u32,
            };
            if total == 0 {
                ::metrics::counter!(metrics::DISPATCH_NO_WORKER, "task" => instance.task_name.clone()).increment(1);
                continue;
            }
            fan_outs.push(TransitionRequest {
                instance_id: instance.id.clone(),
                command: Command::FanOut { total },
                operator: operator.clone(),
                result: None,
            });
            continue;
        }
        let held = |w: &&WorkerEntry| load.get(w.heartbeat.worker_id.as_str()).copied().unwrap_or(0);
        let open: Vec<&WorkerEntry> = eligible_workers.iter().copied().filter(|w| held(w) < capacity(w)).collect();
        // A shard goes to a worker without a sibling while one has room.
        let siblings = instance.shard.as_ref().and_then(|s| shard_holders.get(&s.parent_id));
        let apart: Vec<&WorkerEntry> =
            open.iter().copied().filter(|w| siblings.is_none_or(|held| !held.contains(w.heartbeat.worker_id.as_str()))).collect();
        let open = if apart.is_empty() { open } else { apart };
        let choice = match definition.dispatch.strategy {
            // The ring over every eligible worker (full ones included, so a busy
            // owner does not reshuffle the ring), first one with a free slot. Shards
            // hash by index, so shard i keeps its worker from firing to firing.
            DispatchStrategy::Hash => {
                let ids: Vec<&str> = eligible_workers.iter().map(|w| w.heartbeat.worker_id.as_str()).collect();
                let key = match &instance.shard {
                    Some(shard) => format!("{}#{}", instance.task_name, shard.index),
                    None => instance.task_name.clone(),
                };
                crate::ring::candidates(&ids, &key)
                    .into_iter()
                    .find_map(|id| open.iter().find(|w| w.heartbeat.worker_id.as_str() == id).copied())
            }
            // Broadcast shards spread by the anti-affinity above, then least running.
            DispatchStrategy::LeastRunning | DispatchStrategy::Broadcast => {
                open.iter().min_by_key(|w| (held(w), w.heartbeat.worker_id.clone())).copied()
            }
        };
        let Some(worker) = choice else {
            ::metrics::counter!(metrics::DISPATCH_NO_WORKER, "task" => instance.task_name.clone()).increment(1);
            continue;
        };
        let worker_id = worker.heartbeat.worker_id.clone();
        *load.entry(worker_id.as_str().to_owned()).or_default() += 1;
        if let Some(shard) = &instance.shard {
            shard_holders.entry(shard.parent_id.clone()).or_default().insert(worker_id.as_str().to_owned());
        }
        requests.push(TransitionRequest {
            instance_id: instance.id.clone(),
            command: Command::Dispatch { worker_id: worker_id.clone(), lease_expires_at: now + lease },
            operator: operator.clone(),
            result: None,
        });
        planned.push((instance, definition, worker_id));
    }
    let mut result = PassResult { looked, cancelled, ..PassResult::default() };
    if !fan_outs.is_empty() {
        // The shards are created in the same commit and are due at once: the drain
        // loop's next pass dispatches them.
        let outcomes = store.transition_fenced(&fan_outs, Some(term.fence)).await?;
        result.fanned_out = outcomes.iter().filter(|o| o.is_ok()).count();
    }
    if requests.is_empty() {
        return Ok(result);
    }
    let outcomes = store.transition_fenced(&requests, Some(term.fence)).await?;
    let mut assignments = Vec::with_capacity(outcomes.len());
    for ((instance, definition, worker_id), outcome) in planned.into_iter().zip(outcomes) {
        match outcome {
            Ok(applied) => {
                ::metrics::counter!(metrics::DISPATCHED, "task" => instance.task_name.clone()).increment(1);
                assignments.push((worker_id.as_str().to_owned(), assignment(&applied.instance, &definition, now)));
            }
            // Someone else moved it first (cancelled, or another dispatcher): fine.
            Err(refusal) => tracing::debug!(instance_id = %instance.id, reason = %refusal, "dispatch refused"),
        }
    }
    result.moved += assignments.len();
    if let Err(err) = shared.deps.queues.push(&assignments).await {
        tracing::warn!(error = %err, count = assignments.len(), "pushing assignments failed; their leases will expire and they will be recovered");
        ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "queue_push").increment(1);
    }
    Ok(result)
}

/// A cron fire of a task without a concurrency limit is created up to the planner's
/// window ahead of its time (`cron::plan_fires`), so whether its task was enabled at
/// the fire time is decided here, once it is due. A task disabled at or before the
/// fire time does not run it: the fire is cancelled and stays consumed (one
/// instance per fire). A task enabled again by then runs it as if nothing happened;
/// a fire that came due while the task was enabled and only waits for a worker
/// runs, as a fire created at its time would.
async fn cancel_fires_of_disabled_tasks(shared: &Shared, term: &Term, due: Vec<InstanceRecord>) -> anyhow::Result<(Vec<InstanceRecord>, usize)> {
    let ahead: Vec<&TaskId> = due.iter().filter(|i| created_ahead(i)).map(|i| &i.task_id).collect();
    if ahead.is_empty() {
        return Ok((due, 0));
    }
    let not_enabled = shared.deps.store.tasks_not_enabled(&ahead).await?;
    if not_enabled.is_empty() {
        return Ok((due, 0));
    }
    let (off, due): (Vec<InstanceRecord>, Vec<InstanceRecord>) =
        due.into_iter().partition(|i| created_ahead(i) && not_enabled.get(&i.task_id).is_some_and(|&since| i.due_at >= since));
    let operator = format!("scheduler@{}", term.fence.epoch);
    let requests: Vec<TransitionRequest> = off
        .iter()
        .map(|i| TransitionRequest {
            instance_id: i.id.clone(),
            command: Command::Cancel { reason: "task disabled".into() },
            operator: operator.clone(),
            result: None,
        })
        .collect();
    let outcomes = shared.deps.store.transition_fenced(&requests, Some(term.fence)).await?;
    let cancelled = outcomes.iter().filter(|o| o.is_ok()).count();
    tracing::info!(cancelled, "cron fires of disabled tasks cancelled at their time");
    Ok((due, cancelled))
}

fn created_ahead(instance: &InstanceRecord) -> bool {
    instance.trigger_type == TriggerKind::Cron && instance.attempt == 1 && instance.shard.is_none() && instance.created_at < instance.due_at
}

/// How many instances a worker may hold: its slots plus what it takes ahead.
fn capacity(worker: &WorkerEntry) -> u32 {
    worker.heartbeat.max_running.saturating_add(worker.heartbeat.prefetch)
}

/// RETRYING instances whose back-off has passed begin their next attempt.
async fn release_due_retries(shared: &Shared, term: &Term, due: Vec<InstanceId>) -> anyhow::Result<()> {
    if due.is_empty() {
        return Ok(());
    }
    let requests: Vec<TransitionRequest> = due
        .into_iter()
        .map(|instance_id| TransitionRequest { instance_id, command: Command::NextAttempt, operator: format!("scheduler@{}", term.fence.epoch), result: None })
        .collect();
    shared.deps.store.transition_fenced(&requests, Some(term.fence)).await?;
    Ok(())
}

/// What a worker needs to run one attempt (workers cannot read MySQL).
pub(crate) fn assignment(instance: &ax_store::InstanceRecord, definition: &ax_domain::task::TaskDefinition, now: ax_domain::Timestamp) -> Assignment {
    Assignment {
        instance_id: instance.id.clone(),
        task: instance.task_name.clone(),
        task_version: instance.task_version,
        attempt: instance.attempt,
        handler: definition.execution.handler.clone(),
        config: definition.execution.config.clone(),
        params: instance.params.clone(),
        payload_version: instance.payload_version,
        timeout_sec: definition.execution.timeout,
        priority: instance.priority,
        trace_id: instance.trace_id.clone(),
        dispatched_at: now,
        // A shard shares its firing's concurrency slot with its siblings, so only
        // the per-instance guard applies to it.
        exclusive: definition.concurrency.max_running_instances == Some(1) && instance.shard.is_none(),
        shard: instance.shard.clone(),
    }
}
