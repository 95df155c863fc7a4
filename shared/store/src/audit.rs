//! The audit trail across instances (seed 6): for the audit API and for comparing
//! MySQL with the event stream (`ax audit verify`).

use std::collections::{HashMap, HashSet};

use ax_domain::Timestamp;
use sqlx::{FromRow, QueryBuilder};

use crate::error::{Context, StoreError};
use crate::Store;

/// One row of `instance_transitions`, with the instance it belongs to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, FromRow)]
pub struct AuditRow {
    /// Commit order; the paging cursor.
    pub id: u64,
    pub instance_id: String,
    pub seq: u32,
    pub event_id: String,
    #[serde(rename = "task")]
    pub task_name: String,
    pub attempt: u32,
    pub from_state: Option<String>,
    pub to_state: String,
    pub operator: String,
    pub reason: String,
    pub worker_id: Option<String>,
    pub created_at: Timestamp,
}

/// Which part of the trail to read, in commit order.
#[derive(Debug, Clone)]
pub struct AuditQuery {
    pub since: Timestamp,
    pub until: Timestamp,
    pub task: Option<String>,
    pub instance: Option<String>,
    /// Only rows after this id (paging).
    pub after: u64,
    pub limit: u32,
}

impl Store {
    pub async fn audit_trail(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, StoreError> {
        let task = query.task.clone().unwrap_or_default();
        let instance = query.instance.clone().unwrap_or_default();
        sqlx::query_as(include_str!("../queries/audit/page.sql"))
            .bind(query.since)
            .bind(query.until)
            .bind(query.after)
            .bind(&task)
            .bind(&task)
            .bind(&instance)
            .bind(&instance)
            .bind(query.limit.clamp(1, 50_000))
            .fetch_all(&self.pool)
            .await
            .at("read audit trail")
    }

    /// Event ids still waiting in the outbox for JetStream.
    pub async fn outbox_event_ids(&self) -> Result<HashSet<String>, StoreError> {
        Ok(self.outbox_events().await?.into_iter().map(|e| e.event_id).collect())
    }

    /// Each instance's last event's sequence number and creation time, as its row says.
    pub async fn instance_seqs(&self, ids: &[&str]) -> Result<HashMap<String, (u32, Timestamp)>, StoreError> {
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(1000) {
            let mut query = QueryBuilder::new("SELECT id, seq, created_at FROM instances WHERE id IN (");
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(id.to_string());
            }
            query.push(")");
            let rows: Vec<(String, u32, Timestamp)> = query.build_query_as().fetch_all(&self.pool).await.at("read instance seqs")?;
            out.extend(rows.into_iter().map(|(id, seq, created_at)| (id, (seq, created_at))));
        }
        Ok(out)
    }
}
