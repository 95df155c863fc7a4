//! Task registration and lookup. Registration takes the task row's lock (seed 2.2),
//! so concurrent updates of one task serialize and each gets its own version.

use std::collections::HashMap;

use ax_domain::event::{Event, EventBody, TaskAction, TaskChanged};
use ax_domain::ids::{EventId, TaskId};
use ax_domain::task::TaskDefinition;
use ax_domain::Timestamp;
use sqlx::{FromRow, MySqlConnection};

use crate::error::{retry_busy, Context, StoreError};
use crate::outbox::OutboxEvent;
use crate::Store;

/// A task as stored: its current definition and lifecycle.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub id: TaskId,
    pub name: String,
    pub version: u32,
    pub enabled: bool,
    pub definition: TaskDefinition,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(FromRow)]
struct TaskRow {
    id: String,
    name: String,
    version: u32,
    enabled: bool,
    definition: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    deleted_at: Option<Timestamp>,
}

impl TryFrom<TaskRow> for TaskRecord {
    type Error = StoreError;
    fn try_from(row: TaskRow) -> Result<Self, StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt { what: "tasks", reason };
        Ok(Self {
            id: row.id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
            definition: serde_json::from_str(&row.definition).map_err(|e| corrupt(format!("definition of {}: {e}", row.name)))?,
            name: row.name,
            version: row.version,
            enabled: row.enabled,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// What a registration did.
#[derive(Debug, Clone, PartialEq)]
pub struct Registered {
    pub task: TaskRecord,
    /// `None` when the definition was identical to the current one: nothing changed.
    pub action: Option<TaskAction>,
}

impl Store {
    /// Registers a new task or a new version of an existing one. Re-registering an
    /// identical definition changes nothing and returns the current version.
    ///
    /// # Errors
    /// MySQL failures; lock conflicts are retried first.
    pub async fn register_task(&self, definition: &TaskDefinition, operator: &str) -> Result<Registered, StoreError> {
        let registered = retry_busy(|| async {
            match self.register_once(definition, operator).await {
                // Two first registrations raced on the unique name: the loser retries
                // and finds the winner's row to lock.
                Err(StoreError::Conflict { .. }) => Err(StoreError::Busy { what: "register task" }),
                other => other,
            }
        })
        .await?;
        if registered.action.is_some() {
            self.outbox_written.notify_one();
        }
        Ok(registered)
    }

    async fn register_once(&self, definition: &TaskDefinition, operator: &str) -> Result<Registered, StoreError> {
        let now = ax_domain::now();
        let json = definition.to_json();
        // Under REPEATABLE READ the locking read of a name not registered yet (and
        // of the new task's cron schedules) took a gap lock, and concurrent first
        // registrations, each then inserting into the gap the other locked,
        // deadlocked (1,711 of 100,000 registrations at 8 at once came back Busy).
        // The unique name still decides a race: the loser's insert fails as a
        // duplicate and is retried as an update.
        let mut conn = self.pool.acquire().await.at("begin register task")?;
        let mut tx = crate::begin_read_committed(&mut conn, "begin register task").await?;
        let current: Option<TaskRow> = sqlx::query_as(include_str!("../queries/task_lock_by_name.sql"))
            .bind(&definition.task_name)
            .fetch_optional(&mut *tx)
            .await
            .at("lock task row")?;
        let previous: Option<TaskDefinition> = current.as_ref().filter(|r| r.deleted_at.is_none()).and_then(|r| serde_json::from_str(&r.definition).ok());
        let fresh = current.is_none();
        let (id, version, created_at, action) = match current {
            None => {
                let id = TaskId::generate();
                sqlx::query(include_str!("../queries/task_insert.sql"))
                    .bind(id.as_str())
                    .bind(&definition.task_name)
                    .bind(&definition.owner)
                    .bind(&json)
                    .bind(now)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .at("insert task")?;
                (id, 1, now, TaskAction::Registered)
            }
            Some(row) => {
                let unchanged = row.deleted_at.is_none()
                    && serde_json::from_str::<TaskDefinition>(&row.definition).ok().as_ref() == Some(definition);
                if unchanged {
                    tx.commit().await.at("commit register task")?;
                    return Ok(Registered { task: row.try_into()?, action: None });
                }
                let version = row.version + 1;
                let action = if row.deleted_at.is_some() { TaskAction::Registered } else { TaskAction::Updated };
                sqlx::query(include_str!("../queries/task_update_definition.sql"))
                    .bind(version)
                    .bind(&definition.owner)
                    .bind(&json)
                    .bind(now)
                    .bind(&row.id)
                    .execute(&mut *tx)
                    .await
                    .at("update task")?;
                let id = parse_task_id(&row.id)?;
                (id, version, row.created_at, action)
            }
        };
        sqlx::query(include_str!("../queries/task_version_insert.sql"))
            .bind(id.as_str())
            .bind(version)
            .bind(&json)
            .bind(operator)
            .bind(now)
            .execute(&mut *tx)
            .await
            .at("insert task version")?;
        crate::chains::sync_edges(&mut tx, &id, definition, previous.as_ref()).await?;
        let replaced = crate::schedules::sync_schedules(&mut tx, &id, definition, version, previous.as_ref(), fresh, now).await?;
        if !replaced.is_empty() {
            let reason = format!("cron trigger changed in version {version}");
            crate::schedules::cancel_fires_ahead(self, &mut tx, &id, |index| replaced.contains(&index), now, &reason, operator).await?;
        }
        let change = TaskChanged { task: definition.task_name.clone(), task_version: version, action, operator: operator.to_owned() };
        insert_task_event(&mut tx, self, change, now).await?;
        tx.commit().await.at("commit register task")?;
        let task = TaskRecord {
            id,
            name: definition.task_name.clone(),
            version,
            enabled: true,
            definition: definition.clone(),
            created_at,
            updated_at: now,
        };
        Ok(Registered { task, action: Some(action) })
    }

    /// The current definition of a task that is not deleted.
    pub async fn task(&self, name: &str) -> Result<Option<TaskRecord>, StoreError> {
        let row: Option<TaskRow> =
            sqlx::query_as(include_str!("../queries/task_by_name.sql")).bind(name).fetch_optional(&self.pool).await.at("get task")?;
        row.map(TaskRecord::try_from).transpose()
    }

    pub async fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let rows: Vec<TaskRow> = sqlx::query_as(include_str!("../queries/task_list.sql")).fetch_all(&self.pool).await.at("list tasks")?;
        rows.into_iter().map(TaskRecord::try_from).collect()
    }

    /// The definitions of several tasks at once (trigger intake resolves a batch).
    pub async fn tasks_by_names(&self, names: &[&str]) -> Result<Vec<TaskRecord>, StoreError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut query = sqlx::QueryBuilder::new(
            "SELECT id, name, version, enabled, definition, created_at, updated_at, deleted_at FROM tasks WHERE deleted_at IS NULL AND name IN (",
        );
        let mut list = query.separated(", ");
        for name in crate::shapes::padded(names) {
            list.push_bind(name.to_string());
        }
        query.push(")");
        let mut conn = self.hot().await?;
        let rows: Vec<TaskRow> = query.build_query_as().fetch_all(&mut *conn).await.at("get tasks by name")?;
        conn.done();
        rows.into_iter().map(TaskRecord::try_from).collect()
    }

    /// The definition an instance was created with. Versions never change, so
    /// callers may cache the answer forever.
    pub async fn task_version(&self, task_id: &TaskId, version: u32) -> Result<Option<TaskDefinition>, StoreError> {
        let json: Option<String> = sqlx::query_scalar(include_str!("../queries/task_version_definition.sql"))
            .bind(task_id.as_str())
            .bind(version)
            .fetch_optional(&self.pool)
            .await
            .at("get task version")?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt { what: "task_versions", reason: e.to_string() }))
            .transpose()
    }
}

impl Store {
    /// Several task versions in one read (the cron planner meets 100,000 tasks in a
    /// minute; one read each was a round trip per fire). Versions never written are
    /// absent from the answer.
    pub async fn task_versions(&self, wanted: &[(TaskId, u32)]) -> Result<Vec<(TaskId, u32, TaskDefinition)>, StoreError> {
        let mut found = Vec::with_capacity(wanted.len());
        for piece in wanted.chunks(ROWS_PER_READ) {
            let mut query = sqlx::QueryBuilder::new("SELECT task_id, version, definition FROM task_versions WHERE (task_id, version) IN (");
            let mut list = query.separated(", ");
            for (task_id, version) in crate::shapes::padded(piece) {
                list.push("(").push_bind_unseparated(task_id.as_str().to_owned()).push_unseparated(", ").push_bind_unseparated(*version).push_unseparated(")");
            }
            query.push(")");
            let mut conn = self.hot().await?;
            let rows: Vec<(String, u32, String)> = query.build_query_as().fetch_all(&mut *conn).await.at("get task versions")?;
            conn.done();
            for (task_id, version, json) in rows {
                let task_id = task_id.parse().map_err(|e: ax_domain::ids::InvalidId| StoreError::Corrupt { what: "task_versions", reason: e.to_string() })?;
                let definition = serde_json::from_str(&json).map_err(|e| StoreError::Corrupt { what: "task_versions", reason: e.to_string() })?;
                found.push((task_id, version, definition));
            }
        }
        Ok(found)
    }
}

/// Rows asked for per read in [`Store::task_versions`] (two placeholders each) and
/// [`Store::tasks_not_enabled`] (one).
const ROWS_PER_READ: usize = 1024;

impl Store {
    /// Which of `tasks` are disabled or deleted now, and since when (their last
    /// change; the dispatcher asks before it sends a cron fire created ahead of its
    /// time). An unknown id counts as deleted since ever.
    pub async fn tasks_not_enabled(&self, tasks: &[&TaskId]) -> Result<HashMap<TaskId, Timestamp>, StoreError> {
        let mut wanted: Vec<&TaskId> = tasks.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut found: HashMap<String, (bool, Timestamp)> = HashMap::with_capacity(wanted.len());
        for piece in wanted.chunks(ROWS_PER_READ) {
            let mut query = sqlx::QueryBuilder::new("SELECT id, enabled = 1 AND deleted_at IS NULL, updated_at FROM tasks WHERE id IN (");
            let mut list = query.separated(", ");
            for task_id in crate::shapes::padded(piece) {
                list.push_bind(task_id.as_str().to_owned());
            }
            query.push(")");
            let mut conn = self.hot().await?;
            let rows: Vec<(String, bool, Timestamp)> = query.build_query_as().fetch_all(&mut *conn).await.at("read which tasks are enabled")?;
            conn.done();
            found.extend(rows.into_iter().map(|(id, enabled, since)| (id, (enabled, since))));
        }
        Ok(wanted
            .into_iter()
            .filter_map(|t| match found.get(t.as_str()) {
                Some((true, _)) => None,
                Some((false, since)) => Some((t.clone(), *since)),
                None => Some((t.clone(), Timestamp::MIN_UTC)),
            })
            .collect())
    }
}

impl Store {
    /// [`Store::task_version`] by task name.
    pub async fn task_version_by_name(&self, task: &str, version: u32) -> Result<Option<TaskDefinition>, StoreError> {
        let json: Option<String> = sqlx::query_scalar(include_str!("../queries/task_version_by_name.sql"))
            .bind(task)
            .bind(version)
            .fetch_optional(&self.pool)
            .await
            .at("get task version by name")?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt { what: "task_versions", reason: e.to_string() }))
            .transpose()
    }
}

impl Store {
    /// Enables or disables a task. A disabled task does not fire (its cron schedule
    /// is kept, so enabling it applies the misfire policy); running instances finish.
    /// A cron fire already created ahead of its time is judged when it is due: the
    /// dispatcher cancels it if the task is disabled then, so disabling and enabling
    /// again within the planner's window skips no fire. `None` if no such task.
    pub async fn set_enabled(&self, name: &str, enabled: bool, operator: &str) -> Result<Option<TaskRecord>, StoreError> {
        // Only the task row is locked here; a planner's fire may hold it (it locks
        // schedules, then task rows), and a lock wait that runs out is retried.
        retry_busy(|| self.set_enabled_once(name, enabled, operator)).await
    }

    async fn set_enabled_once(&self, name: &str, enabled: bool, operator: &str) -> Result<Option<TaskRecord>, StoreError> {
        let now = ax_domain::now();
        let mut tx = self.pool.begin().await.at("begin enable task")?;
        let row: Option<TaskRow> = sqlx::query_as(include_str!("../queries/task_lock_by_name.sql"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .at("lock task row")?;
        let Some(row) = row.filter(|r| r.deleted_at.is_none()) else { return Ok(None) };
        if row.enabled != enabled {
            sqlx::query("UPDATE tasks SET enabled = ?, updated_at = ? WHERE id = ?")
                .bind(enabled)
                .bind(now)
                .bind(&row.id)
                .execute(&mut *tx)
                .await
                .at("set task enabled")?;
            let action = if enabled { TaskAction::Enabled } else { TaskAction::Disabled };
            let change = TaskChanged { task: row.name.clone(), task_version: row.version, action, operator: operator.to_owned() };
            insert_task_event(&mut tx, self, change, now).await?;
        }
        tx.commit().await.at("commit enable task")?;
        self.outbox_written.notify_one();
        let mut task = TaskRecord::try_from(row)?;
        task.enabled = enabled;
        Ok(Some(task))
    }

    /// Deletes a task: it no longer fires or accepts triggers; its instances, audit
    /// trail and versions are kept. `false` if no such task.
    pub async fn delete_task(&self, name: &str, operator: &str) -> Result<bool, StoreError> {
        // The task row, then its schedules: the planner's fire takes them the other
        // way round, so a deadlock is retried.
        retry_busy(|| self.delete_task_once(name, operator)).await
    }

    async fn delete_task_once(&self, name: &str, operator: &str) -> Result<bool, StoreError> {
        let now = ax_domain::now();
        let mut tx = self.pool.begin().await.at("begin delete task")?;
        let row: Option<TaskRow> = sqlx::query_as(include_str!("../queries/task_lock_by_name.sql"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .at("lock task row")?;
        let Some(row) = row.filter(|r| r.deleted_at.is_none()) else { return Ok(false) };
        sqlx::query("UPDATE tasks SET deleted_at = ?, enabled = 0, updated_at = ? WHERE id = ?")
            .bind(now)
            .bind(now)
            .bind(&row.id)
            .execute(&mut *tx)
            .await
            .at("delete task")?;
        sqlx::query("DELETE FROM cron_schedules WHERE task_id = ?").bind(&row.id).execute(&mut *tx).await.at("drop cron schedules")?;
        crate::schedules::cancel_fires_ahead(self, &mut tx, &parse_task_id(&row.id)?, |_| true, now, "task deleted", operator).await?;
        sqlx::query("DELETE FROM chain_edges WHERE downstream_id = ?").bind(&row.id).execute(&mut *tx).await.at("drop chain edges")?;
        let change = TaskChanged { task: row.name.clone(), task_version: row.version, action: TaskAction::Deleted, operator: operator.to_owned() };
        insert_task_event(&mut tx, self, change, now).await?;
        tx.commit().await.at("commit delete task")?;
        self.outbox_written.notify_one();
        Ok(true)
    }
}

fn parse_task_id(id: &str) -> Result<TaskId, StoreError> {
    id.parse().map_err(|e: ax_domain::ids::InvalidId| StoreError::Corrupt { what: "tasks", reason: e.to_string() })
}

async fn insert_task_event(conn: &mut MySqlConnection, store: &Store, change: TaskChanged, now: Timestamp) -> Result<(), StoreError> {
    let subject = store.names.task_event(&change.task, change.action);
    let task = change.task.clone();
    let event = Event { id: EventId::generate(), time: now, body: EventBody::TaskChanged(change) };
    let event = OutboxEvent { event_id: event.id.as_str().to_owned(), subject, task_name: task, instance_id: None, state: None, payload: event.encode() };
    crate::outbox::append(conn, &[event], now).await
}
