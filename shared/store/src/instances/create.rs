//! Creating instances, idempotently by (task, trigger id), many per transaction.

use std::collections::HashMap;

use ax_domain::event::{Event, EventBody, InstanceTransitioned};
use ax_domain::ids::{EventId, InstanceId, TaskId, TraceId};
use ax_domain::state::StateKind;
use ax_domain::task::{Priority, TriggerKind};
use ax_domain::Timestamp;
use sqlx::{MySqlConnection, QueryBuilder};

use crate::error::{retry_busy, Context, StoreError};
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
}

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
        let outcomes = retry_busy(|| self.create_once(batch)).await?;
        if outcomes.iter().any(|o| matches!(o, CreateOutcome::Created(_))) {
            self.outbox_written.notify_one();
        }
        Ok(outcomes)
    }

    async fn create_once(&self, batch: &[NewInstance]) -> Result<Vec<CreateOutcome>, StoreError> {
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

        let mut tx = self.pool.begin().await.at("begin create instances")?;
        let mut claim = QueryBuilder::new("INSERT INTO instance_triggers (task_id, trigger_id, instance_id, created_at) ");
        claim.push_values(&unique, |mut row, &index| {
            row.push_bind(batch[index].task_id.as_str().to_owned())
                .push_bind(batch[index].trigger_id.clone())
                .push_bind(fresh_ids[index].as_str().to_owned())
                .push_bind(now);
        });
        claim.push(" ON DUPLICATE KEY UPDATE instance_id = instance_id");
        claim.build().execute(&mut *tx).await.at("claim trigger ids")?;

        let mut owners = QueryBuilder::new("SELECT task_id, trigger_id, instance_id FROM instance_triggers WHERE (task_id, trigger_id) IN (");
        let mut list = owners.separated(", ");
        for &index in &unique {
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
            let rows: Vec<(&NewInstance, &InstanceId, TraceId)> =
                created.iter().map(|&i| (&batch[i], &fresh_ids[i], TraceId::generate())).collect();
            insert_instances(&mut tx, &rows, now).await?;
            let events: Vec<InstanceTransitioned> = rows
                .iter()
                .map(|(new, id, trace_id)| InstanceTransitioned {
                    task: new.task_name.clone(),
                    task_version: new.task_version,
                    instance_id: (*id).clone(),
                    attempt: 1,
                    seq: 1,
                    from: None,
                    to: new.initial,
                    operator: new.operator.clone(),
                    reason: new.reason.clone(),
                    worker_id: None,
                    trigger_type: new.trigger_type,
                    trigger_id: new.trigger_id.clone(),
                    trace_id: trace_id.clone(),
                })
                .collect();
            append_events(&mut tx, self, &events, now).await?;
        }
        tx.commit().await.at("commit create instances")?;
        Ok(outcomes)
    }
}

async fn insert_instances(
    conn: &mut MySqlConnection,
    rows: &[(&NewInstance, &InstanceId, TraceId)],
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut insert = QueryBuilder::new(
        "INSERT INTO instances (id, created_at, task_id, task_name, task_version, state, attempt, seq, trigger_type, \
         trigger_id, trace_id, params, payload_version, priority, due_at, finished_at, reason, updated_at) ",
    );
    insert.push_values(rows, |mut row, (new, id, trace_id)| {
        let finished_at = new.initial.is_final().then_some(now);
        row.push_bind(id.as_str().to_owned())
            .push_bind(now)
            .push_bind(new.task_id.as_str().to_owned())
            .push_bind(new.task_name.clone())
            .push_bind(new.task_version)
            .push_bind(new.initial.as_str())
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
            .push_bind(truncate(&new.reason))
            .push_bind(now);
    });
    insert.build().execute(conn).await.at("insert instances")?;
    Ok(())
}

/// Appends the audit rows and outbox events of a batch of transitions.
pub(crate) async fn append_events(
    conn: &mut MySqlConnection,
    store: &Store,
    events: &[InstanceTransitioned],
    now: Timestamp,
) -> Result<(), StoreError> {
    let ids: Vec<EventId> = events.iter().map(|_| EventId::generate()).collect();
    let mut audit = QueryBuilder::new(
        "INSERT INTO instance_transitions (instance_id, seq, event_id, task_name, attempt, from_state, to_state, operator, reason, worker_id, created_at) ",
    );
    audit.push_values(events.iter().zip(&ids), |mut row, (e, id)| {
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
    audit.build().execute(&mut *conn).await.at("append audit rows")?;

    let mut outbox = QueryBuilder::new("INSERT INTO outbox (event_id, subject, task_name, instance_id, state, payload, created_at) ");
    outbox.push_values(events.iter().zip(ids), |mut row, (e, id)| {
        let subject = store.names.instance_event(&e.task, e.to);
        let event = Event { id: id.clone(), time: now, body: EventBody::InstanceTransitioned(e.clone()) };
        row.push_bind(id.as_str().to_owned())
            .push_bind(subject)
            .push_bind(e.task.clone())
            .push_bind(e.instance_id.as_str().to_owned())
            .push_bind(e.to.as_str())
            .push_bind(event.encode())
            .push_bind(now);
    });
    outbox.build().execute(conn).await.at("append outbox events")?;
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
        }
    }
}
