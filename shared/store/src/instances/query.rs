//! Reading instances and their audit trail.

use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::Timestamp;
use sqlx::{FromRow, QueryBuilder};

use super::{InstanceRecord, InstanceRow, INSTANCE_COLUMNS};
use crate::error::{Context, StoreError};
use crate::Store;

/// Which instances to list; newest first.
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub task: Option<String>,
    pub state: Option<StateKind>,
    /// Only instances older than this id (for paging).
    pub before: Option<InstanceId>,
    pub limit: u32,
}

/// One row of the audit trail.
#[derive(Debug, Clone, PartialEq, serde::Serialize, FromRow)]
pub struct TransitionRecord {
    pub seq: u32,
    pub event_id: String,
    pub attempt: u32,
    pub from_state: Option<String>,
    pub to_state: String,
    pub operator: String,
    pub reason: String,
    pub worker_id: Option<String>,
    pub created_at: Timestamp,
}

impl Store {
    pub async fn instance(&self, id: &InstanceId) -> Result<Option<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?");
        let row: Option<InstanceRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id.as_str()).fetch_optional(&self.pool).await.at("get instance")?;
        row.map(InstanceRecord::try_from).transpose()
    }

    pub async fn instances(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>, StoreError> {
        let mut query = QueryBuilder::new(format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE 1 = 1"));
        if let Some(task) = &filter.task {
            query.push(" AND task_name = ").push_bind(task.clone());
        }
        if let Some(state) = filter.state {
            query.push(" AND state = ").push_bind(state.as_str());
        }
        if let Some(before) = &filter.before {
            query.push(" AND id < ").push_bind(before.as_str().to_owned());
        }
        query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit.clamp(1, 1000));
        let rows: Vec<InstanceRow> = query.build_query_as().fetch_all(&self.pool).await.at("list instances")?;
        rows.into_iter().map(InstanceRecord::try_from).collect()
    }

    /// The audit trail of one instance, in order.
    pub async fn transitions(&self, id: &InstanceId) -> Result<Vec<TransitionRecord>, StoreError> {
        sqlx::query_as(include_str!("../../queries/transitions_of_instance.sql"))
            .bind(id.as_str())
            .fetch_all(&self.pool)
            .await
            .at("list transitions")
    }

    /// Instances ready to go to a worker: CREATED and due, urgent first, then oldest due.
    pub async fn due_instances(&self, now: Timestamp, limit: u32) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE state = 'CREATED' AND due_at <= ? ORDER BY priority, due_at LIMIT ?"
        );
        let mut conn = self.hot().await?;
        let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await
            .at("list due instances")?;
        conn.done();
        rows.into_iter().map(InstanceRecord::try_from).collect()
    }
}

/// What a dispatch pass reads before the due instances (see [`Store::dispatch_view`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DispatchView {
    /// How many instances each worker holds (DISPATCHED or RUNNING): the load the
    /// dispatcher balances, read from the authority rather than guessed.
    pub held: Vec<(String, u32)>,
    /// RETRYING instances whose next attempt is due, urgent first.
    pub due_retries: Vec<InstanceId>,
}

impl Store {
    /// The held counts and the due retries, in one round trip: both are read on
    /// every dispatch pass, on the way from a trigger to RUNNING.
    pub async fn dispatch_view(&self, now: Timestamp, retry_limit: u32) -> Result<DispatchView, StoreError> {
        let mut conn = self.hot().await?;
        let rows: Vec<(String, String, i64)> = sqlx::query_as(include_str!("../../queries/instances_dispatch_view.sql"))
            .bind(now)
            .bind(retry_limit)
            .fetch_all(&mut *conn)
            .await
            .at("read the dispatch view")?;
        conn.done();
        let mut view = DispatchView::default();
        for (kind, reference, count) in rows {
            match kind.as_str() {
                "held" => view.held.push((reference, count.max(0) as u32)),
                _ => view.due_retries.push(
                    reference.parse().map_err(|e: ax_domain::ids::InvalidId| StoreError::Corrupt { what: "instances", reason: e.to_string() })?,
                ),
            }
        }
        Ok(view)
    }
}

impl Store {
    /// CREATED and RETRYING instances due after `now`, soonest first: what the
    /// leader's timer must wake up for.
    pub async fn future_due(&self, now: Timestamp, limit: u32) -> Result<Vec<FutureDue>, StoreError> {
        let mut query = sqlx::query_as(include_str!("../../queries/instances_future_due.sql"));
        for _ in 0..6 {
            query = query.bind(now).bind(limit);
        }
        let rows: Vec<(String, Timestamp, i64)> = query.bind(limit).fetch_all(&self.pool).await.at("list future due instances")?;
        Ok(rows.into_iter().map(|(id, due_at, cron_fire)| FutureDue { id, due_at, cron_fire: cron_fire != 0 }).collect())
    }
}

/// An instance waiting for its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FutureDue {
    pub id: String,
    pub due_at: Timestamp,
    /// A cron fire created ahead of its time (its wake-up is the fire's skew).
    pub cron_fire: bool,
}

/// An attempt whose lease or deadline passed.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Overdue {
    pub id: String,
    pub task_id: String,
    pub task_version: u32,
    pub attempt: u32,
    pub state: String,
    pub worker_id: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub deadline_at: Option<Timestamp>,
}

impl Store {
    /// DISPATCHED or RUNNING attempts whose lease ran out before `now`.
    pub async fn expired_leases(&self, now: Timestamp, limit: u32) -> Result<Vec<Overdue>, StoreError> {
        sqlx::query_as(include_str!("../../queries/instances_expired_leases.sql")).bind(now).bind(limit).fetch_all(&self.pool).await.at("list expired leases")
    }

    /// RUNNING attempts past their deadline before `before`.
    pub async fn past_deadline(&self, before: Timestamp, limit: u32) -> Result<Vec<Overdue>, StoreError> {
        sqlx::query_as(include_str!("../../queries/instances_past_deadline.sql")).bind(before).bind(limit).fetch_all(&self.pool).await.at("list attempts past deadline")
    }

    /// DISPATCHED instances (to push again after Redis lost its queues).
    pub async fn dispatched(&self, limit: u32) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE state = 'DISPATCHED' ORDER BY priority, due_at LIMIT ?");
        let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(limit).fetch_all(&self.pool).await.at("list dispatched")?;
        rows.into_iter().map(InstanceRecord::try_from).collect()
    }

    /// Extends the leases of the attempts `worker` says it holds, and returns those
    /// of them it does not hold any more (the worker must stop them).
    pub async fn renew_held(&self, worker: &str, held: &[(InstanceId, u32)], until: Timestamp) -> Result<Vec<InstanceId>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let mut still = QueryBuilder::new("SELECT id, attempt FROM instances WHERE worker_id = ");
        still.push_bind(worker.to_owned()).push(" AND state IN ('DISPATCHED', 'RUNNING') AND id IN (");
        let mut list = still.separated(", ");
        for (id, _) in crate::shapes::padded(held) {
            list.push_bind(id.as_str().to_owned());
        }
        still.push(")");
        let rows: Vec<(String, u32)> = still.build_query_as().fetch_all(&self.pool).await.at("check held attempts")?;
        let current: std::collections::HashMap<String, u32> = rows.into_iter().collect();
        let mut kept = Vec::new();
        let mut lost = Vec::new();
        for (id, attempt) in held {
            if current.get(id.as_str()) == Some(attempt) {
                kept.push(id.as_str().to_owned());
            } else {
                lost.push(id.clone());
            }
        }
        if !kept.is_empty() {
            let mut renew = QueryBuilder::new("UPDATE instances SET lease_expires_at = ");
            renew.push_bind(until).push(" WHERE worker_id = ").push_bind(worker.to_owned());
            renew.push(" AND state IN ('DISPATCHED', 'RUNNING') AND lease_expires_at < ").push_bind(until).push(" AND id IN (");
            let mut list = renew.separated(", ");
            for id in crate::shapes::padded(&kept) {
                list.push_bind(id.clone());
            }
            renew.push(")");
            renew.build().execute(&self.pool).await.at("renew held leases")?;
        }
        Ok(lost)
    }

    /// Stores a handler's progress for the attempt that reported it.
    pub async fn set_progress(&self, id: &InstanceId, attempt: u32, worker: &str, percent: u8, message: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE instances SET progress_percent = ?, progress_message = ? WHERE id = ? AND attempt = ? AND worker_id = ? AND state = 'RUNNING'",
        )
        .bind(percent.min(100))
        .bind(super::create::truncate(message).chars().take(500).collect::<String>())
        .bind(id.as_str())
        .bind(attempt)
        .bind(worker)
        .execute(&self.pool)
        .await
        .at("store progress")?;
        Ok(done.rows_affected() == 1)
    }
}

impl Store {
    /// Per firing, the workers that hold (DISPATCHED or RUNNING) one of its shards.
    pub async fn shard_holders(
        &self,
        firings: &[&InstanceId],
    ) -> Result<std::collections::HashMap<InstanceId, std::collections::HashSet<String>>, StoreError> {
        let mut holders: std::collections::HashMap<InstanceId, std::collections::HashSet<String>> = Default::default();
        if firings.is_empty() {
            return Ok(holders);
        }
        let mut query = QueryBuilder::new("SELECT parent_id, worker_id FROM instances WHERE parent_id IN (");
        let mut list = query.separated(", ");
        for id in crate::shapes::padded(firings) {
            list.push_bind(id.as_str().to_owned());
        }
        query.push(") AND state IN ('DISPATCHED', 'RUNNING')");
        let rows: Vec<(String, Option<String>)> = query.build_query_as().fetch_all(&self.pool).await.at("list shard holders")?;
        for (parent, worker) in rows {
            if let (Ok(parent), Some(worker)) = (parent.parse(), worker) {
                holders.entry(parent).or_default().insert(worker);
            }
        }
        Ok(holders)
    }

    /// The shards of a fanned-out firing, by index.
    pub async fn shards_of(&self, firing: &InstanceId) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE parent_id = ? ORDER BY shard_index");
        let rows: Vec<InstanceRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(firing.as_str()).fetch_all(&self.pool).await.at("list shards")?;
        rows.into_iter().map(InstanceRecord::try_from).collect()
    }
}
