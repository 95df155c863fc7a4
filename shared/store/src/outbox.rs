//! The outbox: events committed with their cause, waiting for JetStream's ack.

use ax_domain::Timestamp;
use sqlx::{FromRow, QueryBuilder};

use crate::error::{Context, StoreError};
use crate::Store;

#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct OutboxRow {
    pub id: u64,
    pub event_id: String,
    pub subject: String,
    pub task_name: String,
    pub instance_id: Option<String>,
    pub state: Option<String>,
    pub payload: Vec<u8>,
    pub created_at: Timestamp,
}

impl Store {
    /// The oldest unpublished events, in commit order per instance.
    pub async fn outbox_pending(&self, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        sqlx::query_as(include_str!("../queries/outbox_pending.sql")).bind(limit).fetch_all(&self.pool).await.at("read outbox")
    }

    /// Forgets events JetStream acknowledged.
    pub async fn outbox_delete(&self, ids: &[u64]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut query = QueryBuilder::new("DELETE FROM outbox WHERE id IN (");
        let mut list = query.separated(", ");
        for id in crate::shapes::padded(ids) {
            list.push_bind(*id);
        }
        query.push(")");
        query.build().execute(&self.pool).await.at("delete published outbox rows")?;
        Ok(())
    }

    /// How many events wait, and the age of the oldest (for the outbox-lag metric).
    pub async fn outbox_lag(&self) -> Result<(u64, Option<Timestamp>), StoreError> {
        let (count, oldest): (i64, Option<Timestamp>) =
            sqlx::query_as("SELECT COUNT(*), MIN(created_at) FROM outbox").fetch_one(&self.pool).await.at("measure outbox")?;
        Ok((count.max(0) as u64, oldest))
    }
}
