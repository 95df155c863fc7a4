//! The guarded transition: the only way an instance changes state.

use std::collections::HashMap;

use ax_domain::event::InstanceTransitioned;
use ax_domain::ids::InstanceId;
use ax_domain::state::{apply, Command, InstanceState, Snapshot, TransitionError};
use ax_domain::Timestamp;
use sqlx::QueryBuilder;

use super::create::{append_events, truncate};
use super::shards::ShardWork;
use super::{InstanceRecord, InstanceRow, ShardCounts, INSTANCE_COLUMNS};
use crate::error::{retry_busy, Context, StoreError};
use crate::leader::{check_fence, Fence};
use crate::shapes::padded;
use crate::Store;

/// A request to move one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRequest {
    pub instance_id: InstanceId,
    pub command: Command,
    /// Who asks: `scheduler`, `worker:<id>`, `api`, … (recorded in the audit trail).
    pub operator: String,
    /// A handler's result, stored with a success.
    pub result: Option<serde_json::Value>,
}

/// A committed transition: the instance after it and the event it emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub instance: InstanceRecord,
    pub event: InstanceTransitioned,
}

/// Why a request changed nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("instance not found")]
    NotFound,
    #[error(transparent)]
    Transition(#[from] TransitionError),
}

impl Store {
    /// Applies a batch of transitions in one transaction. Each request is decided on
    /// its own (one refused request does not stop the others); requests for the same
    /// instance apply in order.
    ///
    /// # Errors
    /// MySQL failures, after retrying lock conflicts; nothing of the batch is written then.
    pub async fn transition(&self, batch: &[TransitionRequest]) -> Result<Vec<Result<Applied, Refusal>>, StoreError> {
        self.transition_fenced(batch, None).await
    }

    /// [`Store::transition`] for leader work: commits only while `fence` is the
    /// current leadership term.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another scheduler has become leader since.
    pub async fn transition_fenced(
        &self,
        batch: &[TransitionRequest],
        fence: Option<Fence>,
    ) -> Result<Vec<Result<Applied, Refusal>>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = retry_busy(|| self.transition_once(batch, fence)).await?;
        if outcomes.iter().any(Result::is_ok) {
            self.outbox_written.notify_one();
        }
        Ok(outcomes)
    }

    async fn transition_once(&self, batch: &[TransitionRequest], fence: Option<Fence>) -> Result<Vec<Result<Applied, Refusal>>, StoreError> {
        let mut conn = self.hot().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await.at("begin transition")?;
        if let Some(fence) = fence {
            check_fence(&mut tx, fence).await?;
        }
        let outcomes = self.apply_in(&mut tx, batch).await?;
        tx.commit().await.at("commit transition")?;
        conn.done();
        Ok(outcomes)
    }

    /// The guarded transition inside a caller's transaction (so creation, release
    /// and transitions can share one commit).
    pub(crate) async fn apply_in(
        &self,
        tx: &mut sqlx::MySqlConnection,
        batch: &[TransitionRequest],
    ) -> Result<Vec<Result<Applied, Refusal>>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let now = ax_domain::now();
        let mut ids: Vec<&str> = batch.iter().map(|r| r.instance_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        // Locks in primary-key order, so concurrent batches cannot deadlock each other.
        let mut select = QueryBuilder::new(format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id IN ("));
        let mut list = select.separated(", ");
        for id in padded(&ids) {
            list.push_bind(id.to_string());
        }
        select.push(") ORDER BY id FOR UPDATE");
        let rows: Vec<InstanceRow> = select.build_query_as().fetch_all(&mut *tx).await.at("lock instances")?;
        let mut current: HashMap<InstanceId, InstanceRecord> = HashMap::with_capacity(rows.len());
        for row in rows {
            let record = InstanceRecord::try_from(row)?;
            current.insert(record.id.clone(), record);
        }

        let mut outcomes = Vec::with_capacity(batch.len());
        let mut events = Vec::new();
        let mut shard_work = ShardWork::default();
        // Per instance moved: the row as locked and the row after its last move.
        let mut writes: Vec<(InstanceRecord, InstanceRecord)> = Vec::new();
        let mut write_of: HashMap<InstanceId, usize> = HashMap::new();
        for request in batch {
            let Some(before) = current.get(&request.instance_id) else {
                outcomes.push(Err(Refusal::NotFound));
                continue;
            };
            let snapshot = Snapshot { state: before.state.clone(), attempt: before.attempt };
            let moved = match apply(snapshot, request.command.clone(), now) {
                Ok(moved) => moved,
                Err(err) => {
                    outcomes.push(Err(Refusal::Transition(err)));
                    continue;
                }
            };
            let after = next_record(before, &moved.state, moved.attempt, &moved.reason, request.result.clone(), now);
            shard_work.note(before, &after, &request.command, &request.operator);
            match write_of.get(&after.id) {
                Some(&slot) => writes[slot].1 = after.clone(),
                None => {
                    write_of.insert(after.id.clone(), writes.len());
                    writes.push((before.clone(), after.clone()));
                }
            }
            let event = InstanceTransitioned {
                task: after.task_name.clone(),
                task_version: after.task_version,
                instance_id: after.id.clone(),
                attempt: after.attempt,
                seq: after.seq,
                from: Some(moved.from),
                to: after.state.kind(),
                operator: request.operator.clone(),
                reason: after.reason.clone(),
                worker_id: after.last_worker_id.clone(),
                trigger_type: after.trigger_type,
                trigger_id: after.trigger_id.clone(),
                trace_id: after.trace_id.clone(),
                shard: after.shard.clone(),
            };
            events.push(event.clone());
            current.insert(after.id.clone(), after.clone());
            outcomes.push(Ok(Applied { instance: after, event }));
        }
        for piece in writes.chunks(MAX_UPDATE) {
            write_guarded(&mut *tx, piece).await?;
        }
        if !events.is_empty() {
            append_events(&mut *tx, self, &events, now).await?;
        }
        if !shard_work.is_empty() {
            self.follow_shards(&mut *tx, shard_work).await?;
        }
        Ok(outcomes)
    }
}

/// The record after a move: every column that depends on the state follows it.
fn next_record(
    before: &InstanceRecord,
    state: &InstanceState,
    attempt: u32,
    reason: &str,
    result: Option<serde_json::Value>,
    now: Timestamp,
) -> InstanceRecord {
    let mut after = before.clone();
    after.state = state.clone();
    after.attempt = attempt;
    after.seq = before.seq + 1;
    after.reason = truncate(reason);
    after.updated_at = now;
    if let Some(worker) = state.worker_id() {
        after.last_worker_id = Some(worker.clone());
    }
    match state {
        InstanceState::Running(running) => after.started_at = Some(running.started_at),
        InstanceState::Retrying(retrying) => after.due_at = retrying.next_attempt_at,
        InstanceState::Finished(finished) => after.finished_at = Some(finished.finished_at),
        InstanceState::Sharded(sharded) => {
            after.shards = Some(ShardCounts { total: sharded.total, open: sharded.total, failed: 0, cancelled: 0 });
        }
        _ => {}
    }
    if result.is_some() {
        after.result = result;
    }
    after
}

/// Rows per guarded UPDATE (28 placeholders each, far below MySQL's 65,535).
const MAX_UPDATE: usize = 512;

/// One guarded `UPDATE` for a whole batch (`WHERE id IN (…)` and, per row, `state`
/// and `attempt` as they were locked), each column
/// set by `CASE id`: one round trip instead of one per instance. The rows are locked
/// already, so the guard cannot fail unless something bypassed the lock, which is
/// reported.
async fn write_guarded(conn: &mut sqlx::MySqlConnection, moved: &[(InstanceRecord, InstanceRecord)]) -> Result<(), StoreError> {
    // Padded to a power of two with the last row again (see `shapes`): a repeated
    // `WHEN` never matches and a repeated `IN` member changes nothing.
    let rows: Vec<&(InstanceRecord, InstanceRecord)> = padded(moved).collect();
    let rows = rows.as_slice();
    let mut update = QueryBuilder::new("UPDATE instances SET ");
    let column = |update: &mut QueryBuilder<sqlx::MySql>, name: &str, first: bool, bind: &dyn Fn(&mut QueryBuilder<sqlx::MySql>, &InstanceRecord)| {
        if !first {
            update.push(", ");
        }
        update.push(name).push(" = CASE id");
        for (before, after) in rows {
            update.push(" WHEN ").push_bind(before.id.as_str().to_owned()).push(" THEN ");
            bind(update, after);
        }
        update.push(" END");
    };
    column(&mut update, "state", true, &|u, a| {
        u.push_bind(a.state.kind().as_str());
    });
    column(&mut update, "attempt", false, &|u, a| {
        u.push_bind(a.attempt);
    });
    column(&mut update, "seq", false, &|u, a| {
        u.push_bind(a.seq);
    });
    // A final or waiting instance keeps the last worker for the record, but no lease.
    column(&mut update, "worker_id", false, &|u, a| {
        let worker = a.state.worker_id().or(a.last_worker_id.as_ref()).map(|w| w.as_str().to_owned());
        u.push_bind(worker);
    });
    column(&mut update, "lease_expires_at", false, &|u, a| {
        u.push_bind(a.state.lease_expires_at());
    });
    column(&mut update, "deadline_at", false, &|u, a| {
        u.push_bind(match &a.state {
            InstanceState::Running(running) => Some(running.deadline_at),
            _ => None,
        });
    });
    column(&mut update, "started_at", false, &|u, a| {
        u.push_bind(a.started_at);
    });
    column(&mut update, "finished_at", false, &|u, a| {
        u.push_bind(a.finished_at);
    });
    column(&mut update, "due_at", false, &|u, a| {
        u.push_bind(a.due_at);
    });
    column(&mut update, "reason", false, &|u, a| {
        u.push_bind(a.reason.clone());
    });
    column(&mut update, "result", false, &|u, a| {
        u.push_bind(a.result.as_ref().map(|r| r.to_string()));
    });
    column(&mut update, "updated_at", false, &|u, a| {
        u.push_bind(a.updated_at);
    });
    // `id IN` alone narrows the rows (the primary key); the guard on state and
    // attempt is a `CASE` evaluated per row. A row-constructor `IN` did the same, but
    // MariaDB's range optimizer spent a tenth of its CPU analysing it.
    update.push(" WHERE id IN (");
    let mut ids = update.separated(", ");
    for (before, _) in rows {
        ids.push_bind(before.id.as_str().to_owned());
    }
    update.push(") AND CASE id");
    for (before, _) in rows {
        update
            .push(" WHEN ")
            .push_bind(before.id.as_str().to_owned())
            .push(" THEN state = ")
            .push_bind(before.state.kind().as_str())
            .push(" AND attempt = ")
            .push_bind(before.attempt);
    }
    update.push(" ELSE FALSE END");
    let done = update.build().execute(conn).await.at("guarded update")?;
    if done.rows_affected() != moved.len() as u64 {
        return Err(StoreError::Corrupt {
            what: "instances",
            reason: format!("guarded update of {} instances matched {} rows under lock", moved.len(), done.rows_affected()),
        });
    }
    Ok(())
}
