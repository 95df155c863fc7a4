//! Creating instances, idempotently by (task, trigger id), many per transaction.

use std::collections::HashMap;

use ax_domain::event::{Event, EventBody, InstanceTransitioned};
use ax_domain::ids::{EventId, InstanceId, TaskId, TraceId};
use ax_domain::shard::ShardOf;
use ax_domain::state::StateKind;
use ax_domain::task::{BlockingStrategy, Priority, TriggerKind};
use ax_domain::Timestamp;
use sqlx::{MySqlConnection, QueryBuilder};

use crate::error::{retry_busy, Context, StoreError};
use crate::shapes::{padded, pieces};
use crate::outbox::OutboxEvent;
use crate::Store;

/// One instance to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInstance {
    pub task_id: TaskId,
    pub task_name: String,
    pub task_version: u32,
    pub trigger_type: TriggerKind,
    /// At most one instance per (task, trigger id), ever.
    pub trigger_id: String,
    pub params: serde_json::Value,
    pub payload_version: Option<u32>,
    pub priority: Priority,
    pub due_at: Timestamp,
    /// `Created`, or a state an instance may be born in that ends it at once
    /// (`Rejected`, `Discarded`) with `reason`.
    pub initial: StateKind,
    pub reason: String,
    pub operator: String,
    /// The task's `max_running_instances` and blocking strategy, when limited:
    /// decided under the task row's lock, so the count and the insert are atomic.
    pub concurrency: Option<(u32, BlockingStrategy)>,
    /// Set on the shard instances a firing fans out into.
    pub shard: Option<ShardOf>,
}

/// Instances created per round of statements. The inserts go in `shapes::pieces`
/// (at most 512 rows of 21 placeholders); the padded trigger-id lookup takes two
/// placeholders per instance. A power of two, so a full chunk makes whole pieces.
const CREATE_CHUNK: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created(InstanceId),
    /// The trigger id had already created this instance.
    Duplicate(InstanceId),
}

impl CreateOutcome {
    pub fn instance_id(&self) -> &InstanceId {
        match self {
            CreateOutcome::Created(id) | CreateOutcome::Duplicate(id) => id,
        }
    }
}

impl Store {
    /// Creates a batch of instances in one transaction; outcomes are in request order.
    ///
    /// # Errors
    /// MySQL failures, after retrying lock conflicts; nothing of the batch is written then.
    pub async fn create_instances(&self, batch: &[NewInstance]) -> Result<Vec<CreateOutcome>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        for new in batch {
            debug_assert!(new.initial.is_initial(), "{} is not an initial state", new.initial);
        }
        let outcomes = retry_busy(|| async {
            let mut conn = self.hot().await?;
            // Under REPEATABLE READ the claim's locking read of its trigger ids took
            // next-key locks, so concurrent batches (intake commits several at
            // once) waited on and deadlocked with each other (3 deadlocks and 0.9 s
            // of lock waits in one 10,000-trigger benchmark run).
            let mut tx = crate::begin_read_committed(&mut conn, "begin create instances").await?;
            let outcomes = self.create_in(&mut tx, batch).await?;
            tx.commit().await.at("commit create instances")?;
            conn.done();
            Ok(outcomes)
        })
        .await?;
        if outcomes.iter().any(|o| matches!(o, CreateOutcome::Created(_))) {
            self.outbox_written.notify_one();
        }
        Ok(outcomes)
    }

    /// Creation inside a caller's transaction.
    pub(crate) async fn create_in(&self, tx: &mut MySqlConnection, batch: &[NewInstance]) -> Result<Vec<CreateOutcome>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // A statement takes at most 65,535 placeholders: a large batch (a misfire
        // catch-up of thousands of schedules, a backfill) goes in chunks, still in
        // the caller's one transaction. A trigger id that
        // repeats across pieces is found by the later piece's claim (same transaction).
        if batch.len() > CREATE_CHUNK {
            let mut outcomes = Vec::with_capacity(batch.len());
            for piece in batch.chunks(CREATE_CHUNK) {
                outcomes.extend(Box::pin(self.create_in(&mut *tx, piece)).await?);
            }
            return Ok(outcomes);
        }
        let now = ax_domain::now();
        // The same trigger twice in one batch: the first one speaks for both.
        let mut first_of: HashMap<(&TaskId, &str), usize> = HashMap::new();
        let mut fresh_ids: Vec<InstanceId> = Vec::with_capacity(batch.len());
        let mut unique: Vec<usize> = Vec::new();
        for (index, new) in batch.iter().enumerate() {
            fresh_ids.push(InstanceId::generate());
            if let std::collections::hash_map::Entry::Vacant(slot) = first_of.entry((&new.task_id, new.trigger_id.as_str())) {
                slot.insert(index);
                unique.push(index);
            }
        }

        for piece in pieces(&unique) {
            let mut claim = QueryBuilder::new("INSERT INTO instance_triggers (task_id, trigger_id, instance_id, created_at) ");
            claim.push_values(piece, |mut row, &index| {
                row.push_bind(batch[index].task_id.as_str().to_owned())
                    .push_bind(batch[index].trigger_id.clone())
                    .push_bind(fresh_ids[index].as_str().to_owned())
                    .push_bind(now);
            });
            claim.push(" ON DUPLICATE KEY UPDATE instance_id = instance_id");
            claim.build().execute(&mut *tx).await.at("claim trigger ids")?;
        }

        let mut owners = QueryBuilder::new("SELECT task_id, trigger_id, instance_id FROM instance_triggers WHERE (task_id, trigger_id) IN (");
        let mut list = owners.separated(", ");
        for &index in padded(&unique) {
            list.push("(")
                .push_bind_unseparated(batch[index].task_id.as_str().to_owned())
                .push_unseparated(", ")
                .push_bind_unseparated(batch[index].trigger_id.clone())
                .push_unseparated(")");
        }
        owners.push(") FOR UPDATE");
        let rows: Vec<(String, String, String)> = owners.build_query_as().fetch_all(&mut *tx).await.at("read trigger owners")?;
        let owner_of: HashMap<(String, String), String> = rows.into_iter().map(|(t, g, i)| ((t, g), i)).collect();

        let mut outcomes = Vec::with_capacity(batch.len());
        let mut created: Vec<usize> = Vec::new();
        for (index, new) in batch.iter().enumerate() {
            let first = first_of[&(&new.task_id, new.trigger_id.as_str())];
            let owner = owner_of
                .get(&(new.task_id.as_str().to_owned(), new.trigger_id.clone()))
                .ok_or(StoreError::Corrupt { what: "instance_triggers", reason: format!("claim for {} vanished", new.trigger_id) })?;
            let owner_id: InstanceId = owner.parse().map_err(|e: ax_domain::ids::InvalidId| StoreError::Corrupt { what: "instance_triggers", reason: e.to_string() })?;
            if first == index && owner_id == fresh_ids[index] {
                created.push(index);
                outcomes.push(CreateOutcome::Created(owner_id));
            } else {
                outcomes.push(CreateOutcome::Duplicate(owner_id));
            }
        }

        if !created.is_empty() {
            let decisions = self.admit(&mut *tx, batch, &created, &fresh_ids).await?;
            let rows: Vec<(&NewInstance, &InstanceId, TraceId, StateKind, String)> = created
                .iter()
                .zip(decisions)
                .map(|(&i, (state, reason))| (&batch[i], &fresh_ids[i], TraceId::generate(), state, reason))
                .collect();
            insert_instances(&mut *tx, &rows, now).await?;
            let events: Vec<InstanceTransitioned> = rows
                .iter()
                .map(|(new, id, trace_id, state, reason)| InstanceTransitioned {
                    task: new.task_name.clone(),
                    task_version: new.task_version,
                    instance_id: (*id).clone(),
                    attempt: 1,
                    seq: 1,
                    from: None,
                    to: *state,
                    operator: new.operator.clone(),
                    reason: reason.clone(),
                    worker_id: None,
                    trigger_type: new.trigger_type,
                    trigger_id: new.trigger_id.clone(),
                    trace_id: trace_id.clone(),
                    shard: new.shard.clone(),
                })
                .collect();
            append_events(&mut *tx, self, &events, now).await?;
        }
        Ok(outcomes)
    }

    /// Seed 4.1, first layer: the state each new instance is born in. Tasks with
    /// `max_running_instances` are decided under their row lock (taken in task-id
    /// order, so two batches cannot deadlock): below the limit an instance is
    /// CREATED; at it, `serial` makes it WAITING, `discard` DISCARDED, and `replace`
    /// cancels the oldest active instance to make room.
    async fn admit(
        &self,
        tx: &mut MySqlConnection,
        batch: &[NewInstance],
        created: &[usize],
        fresh_ids: &[InstanceId],
    ) -> Result<Vec<(StateKind, String)>, StoreError> {
        let mut decisions: Vec<(StateKind, String)> = created.iter().map(|&i| (batch[i].initial, batch[i].reason.clone())).collect();
        let mut limited: Vec<&TaskId> = created
            .iter()
            .filter(|&&i| batch[i].concurrency.is_some() && batch[i].initial == StateKind::Created)
            .map(|&i| &batch[i].task_id)
            .collect();
        limited.sort_unstable();
        limited.dedup();
        let mut cancels = Vec::new();
        for task_id in limited {
            sqlx::query("SELECT id FROM tasks WHERE id = ? FOR UPDATE").bind(task_id.as_str()).execute(&mut *tx).await.at("lock task for concurrency")?;
            let active: Vec<String> = sqlx::query_scalar(include_str!("../../queries/instances_active_of_task.sql"))
                .bind(task_id.as_str())
                .fetch_all(&mut *tx)
                .await
                .at("count active instances")?;
            let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_id = ? AND state = 'WAITING'")
                .bind(task_id.as_str())
                .fetch_one(&mut *tx)
                .await
                .at("count waiting instances")?;
            let mut active: std::collections::VecDeque<String> = active.into();
            let mut waiting = waiting.max(0) as usize;
            for (slot, &index) in created.iter().enumerate() {
                let new = &batch[index];
                let Some((max, strategy)) = new.concurrency else { continue };
                if &new.task_id != task_id || new.initial != StateKind::Created {
                    continue;
                }
                // FIFO: an instance may not overtake ones already waiting.
                if active.len() < max as usize && waiting == 0 {
                    active.push_back(fresh_ids[index].as_str().to_owned());
                    continue;
                }
                let held = format!("{} of max_running_instances {max} active", active.len());
                decisions[slot] = match strategy {
                    BlockingStrategy::Serial => {
                        waiting += 1;
                        (StateKind::Waiting, format!("waiting: {held}"))
                    }
                    BlockingStrategy::Discard => (StateKind::Discarded, format!("discarded: {held}")),
                    BlockingStrategy::Replace => {
                        let Some(oldest) = active.pop_front() else {
                            return Err(StoreError::Corrupt { what: "instances", reason: "replace with nothing active".into() });
                        };
                        if let Some(pos) = created.iter().position(|&i| fresh_ids[i].as_str() == oldest) {
                            // The one to replace is new in this same batch: it never starts.
                            decisions[pos] = (StateKind::Discarded, format!("replaced by {}", fresh_ids[index]));
                        } else {
                            cancels.push((oldest, fresh_ids[index].clone()));
                        }
                        active.push_back(fresh_ids[index].as_str().to_owned());
                        (StateKind::Created, String::new())
                    }
                };
            }
        }
        if !cancels.is_empty() {
            let requests: Vec<crate::TransitionRequest> = cancels
                .into_iter()
                .filter_map(|(old, by)| {
                    Some(crate::TransitionRequest {
                        instance_id: old.parse().ok()?,
                        command: ax_domain::state::Command::Cancel { reason: format!("replaced by {by}") },
                        operator: "concurrency".into(),
                        result: None,
                    })
                })
                .collect();
            self.apply_in(&mut *tx, &requests).await?;
        }
        Ok(decisions)
    }
}

async fn insert_instances(
    conn: &mut MySqlConnection,
    rows: &[(&NewInstance, &InstanceId, TraceId, StateKind, String)],
    now: Timestamp,
) -> Result<(), StoreError> {
    for piece in pieces(rows) {
        insert_instance_rows(&mut *conn, piece, now).await?;
    }
    Ok(())
}

async fn insert_instance_rows(
    conn: &mut MySqlConnection,
    rows: &[(&NewInstance, &InstanceId, TraceId, StateKind, String)],
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut insert = QueryBuilder::new(
        "INSERT INTO instances (id, created_at, task_id, task_name, task_version, state, attempt, seq, trigger_type, \
         trigger_id, trace_id, params, payload_version, priority, due_at, finished_at, reason, parent_id, shard_index, \
         shard_total, updated_at) ",
    );
    insert.push_values(rows, |mut row, (new, id, trace_id, state, reason)| {
        let finished_at = state.is_final().then_some(now);
        row.push_bind(id.as_str().to_owned())
            .push_bind(now)
            .push_bind(new.task_id.as_str().to_owned())
            .push_bind(new.task_name.clone())
            .push_bind(new.task_version)
            .push_bind(state.as_str())
            .push_bind(1u32)
            .push_bind(1u32)
            .push_bind(new.trigger_type.as_str())
            .push_bind(new.trigger_id.clone())
            .push_bind(trace_id.as_str().to_owned())
            .push_bind(new.params.to_string())
            .push_bind(new.payload_version)
            .push_bind(new.priority.rank())
            .push_bind(new.due_at)
            .push_bind(finished_at)
            .push_bind(truncate(reason))
            .push_bind(new.shard.as_ref().map(|s| s.parent_id.as_str().to_owned()))
            .push_bind(new.shard.as_ref().map(|s| s.index))
            .push_bind(new.shard.as_ref().map(|s| s.total))
            .push_bind(now);
    });
    insert.build().execute(conn).await.at("insert instances")?;
    Ok(())
}

/// Appends the audit rows and outbox events of a batch of transitions: audit rows
/// in pieces, the events as one outbox row.
pub(crate) async fn append_events(
    conn: &mut MySqlConnection,
    store: &Store,
    events: &[InstanceTransitioned],
    now: Timestamp,
) -> Result<(), StoreError> {
    let ids: Vec<EventId> = events.iter().map(|_| EventId::generate()).collect();
    let rows: Vec<(&InstanceTransitioned, EventId)> = events.iter().zip(ids).collect();
    for piece in pieces(&rows) {
        append_audit_rows(&mut *conn, piece, now).await?;
    }
    let outbox: Vec<OutboxEvent> = rows
        .iter()
        .map(|(e, id)| {
            let event = Event { id: id.clone(), time: now, body: EventBody::InstanceTransitioned((*e).clone()) };
            OutboxEvent {
                event_id: id.as_str().to_owned(),
                subject: store.names.instance_event(&e.task, e.to),
                task_name: e.task.clone(),
                instance_id: Some(e.instance_id.as_str().to_owned()),
                state: Some(e.to.as_str().to_owned()),
                payload: event.encode(),
            }
        })
        .collect();
    crate::outbox::append(conn, &outbox, now).await
}

async fn append_audit_rows(conn: &mut MySqlConnection, rows: &[(&InstanceTransitioned, EventId)], now: Timestamp) -> Result<(), StoreError> {
    let mut audit = QueryBuilder::new(
        "INSERT INTO instance_transitions (instance_id, seq, event_id, task_name, attempt, from_state, to_state, operator, reason, worker_id, created_at) ",
    );
    audit.push_values(rows, |mut row, (e, id)| {
        row.push_bind(e.instance_id.as_str().to_owned())
            .push_bind(e.seq)
            .push_bind(id.as_str().to_owned())
            .push_bind(e.task.clone())
            .push_bind(e.attempt)
            .push_bind(e.from.map(StateKind::as_str))
            .push_bind(e.to.as_str())
            .push_bind(e.operator.clone())
            .push_bind(truncate(&e.reason))
            .push_bind(e.worker_id.as_ref().map(|w| w.as_str().to_owned()))
            .push_bind(now);
    });
    audit.build().execute(conn).await.at("append audit rows")?;
    Ok(())
}

/// Reasons are for people; a runaway one (a handler's whole stderr) is cut to fit.
pub(crate) fn truncate(reason: &str) -> String {
    const MAX: usize = 2000;
    if reason.len() <= MAX {
        return reason.to_owned();
    }
    let mut end = MAX;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &reason[..end])
}

impl NewInstance {
    /// The instance a trigger request asks for. A `payload_version` other than the
    /// task's `schema_version` makes an instance born REJECTED with the reason, so the
    /// refusal is visible and audited and it never runs (seed 3.2). A delay trigger in
    /// the definition delays every firing unless the request says otherwise.
    pub fn from_trigger(
        task: &crate::TaskRecord,
        request: &ax_domain::trigger::TriggerRequest,
        trigger_id: String,
        trigger_type: TriggerKind,
        operator: &str,
        now: Timestamp,
    ) -> Self {
        let definition = &task.definition;
        let default_delay = definition.triggers.iter().find_map(|t| match t {
            ax_domain::task::TriggerSpec::Delay { delay_sec } => Some(*delay_sec),
            _ => None,
        });
        let (initial, reason) = match request.payload_version {
            Some(version) if version != definition.schema_version => (
                StateKind::Rejected,
                format!("payload_version {version} does not match the task's schema_version {}", definition.schema_version),
            ),
            _ => (StateKind::Created, String::new()),
        };
        NewInstance {
            task_id: task.id.clone(),
            task_name: task.name.clone(),
            task_version: task.version,
            trigger_type,
            trigger_id,
            params: request.params.clone(),
            payload_version: request.payload_version,
            priority: request.priority.unwrap_or(definition.priority),
            due_at: request.due_at(now, default_delay),
            initial,
            reason,
            operator: operator.to_owned(),
            concurrency: definition.concurrency.max_running_instances.map(|max| (max, definition.concurrency.blocking_strategy)),
            shard: None,
        }
    }
}

impl NewInstance {
    /// The instance of one cron fire. Its trigger id `cron:<trigger index>:<fire ms>`
    /// makes the fire unique: live firing, misfire catch-up and backfill all agree.
    pub fn for_cron_fire(
        task_id: &TaskId,
        task_version: u32,
        definition: &ax_domain::task::TaskDefinition,
        trigger_index: u16,
        fire: Timestamp,
        operator: &str,
    ) -> Self {
        NewInstance {
            task_id: task_id.clone(),
            task_name: definition.task_name.clone(),
            task_version,
            trigger_type: TriggerKind::Cron,
            trigger_id: format!("cron:{trigger_index}:{}", fire.timestamp_millis()),
            params: serde_json::json!({ "fire_time": fire, "trigger_index": trigger_index }),
            payload_version: None,
            priority: definition.priority,
            due_at: fire,
            initial: StateKind::Created,
            reason: String::new(),
            operator: operator.to_owned(),
            concurrency: definition.concurrency.max_running_instances.map(|m| (m, definition.concurrency.blocking_strategy)),
            shard: None,
        }
    }
}

impl Store {
    /// A new instance that repeats a finished one (same params, the task's current
    /// definition), linked to it by `rerun_of`.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the instance is unknown, not finished, or its task is gone.
    pub async fn rerun(&self, old: &InstanceId, operator: &str) -> Result<InstanceId, StoreError> {
        let refused = |reason: String| StoreError::Refused { field: "id".into(), reason };
        let previous = self.instance(old).await?.ok_or_else(|| refused(format!("instance {old} does not exist")))?;
        if let Some(shard) = &previous.shard {
            return Err(refused(format!(
                "instance {old} is shard {} of firing {}; rerun the firing instead",
                shard.index, shard.parent_id
            )));
        }
        if !previous.state.kind().is_final() {
            return Err(refused(format!("instance {old} is {}; only a finished instance can be rerun", previous.state.kind())));
        }
        let task = self.task(&previous.task_name).await?.ok_or_else(|| refused(format!("task {} is no longer registered", previous.task_name)))?;
        let request = ax_domain::trigger::TriggerRequest { params: previous.params.clone(), payload_version: previous.payload_version, ..Default::default() };
        let trigger_id = format!("rerun:{}:{}", old, ulid::Ulid::new());
        let new = NewInstance::from_trigger(&task, &request, trigger_id, TriggerKind::Manual, operator, ax_domain::now());
        let mut tx = self.pool.begin().await.at("begin rerun")?;
        let outcome = self.create_in(&mut tx, std::slice::from_ref(&new)).await?.remove(0);
        sqlx::query("UPDATE instances SET rerun_of = ? WHERE id = ?")
            .bind(old.as_str())
            .bind(outcome.instance_id().as_str())
            .execute(&mut *tx)
            .await
            .at("link rerun")?;
        tx.commit().await.at("commit rerun")?;
        self.outbox_written.notify_one();
        Ok(outcome.instance_id().clone())
    }
}
