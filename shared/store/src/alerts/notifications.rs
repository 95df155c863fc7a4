//! Webhook deliveries: queued in the transaction that decided them, claimed by one
//! monitor at a time, retried with back-off until sent or out of attempts. A
//! delivery that a monitor claimed and never finished (it died) comes back when
//! its claim runs out: deliveries are at least once.

use ax_domain::ids::{AlertId, ReportId};
use ax_domain::Timestamp;
use sqlx::{FromRow, MySqlConnection, QueryBuilder};

use crate::error::{Context, StoreError};
use crate::Store;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    Firing,
    Resolved,
    Reminder,
    Report,
    Test,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::Firing => "firing",
            NotificationKind::Resolved => "resolved",
            NotificationKind::Reminder => "reminder",
            NotificationKind::Report => "report",
            NotificationKind::Test => "test",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [Self::Firing, Self::Resolved, Self::Reminder, Self::Report, Self::Test].into_iter().find(|k| k.as_str() == value)
    }
}

/// A delivery to queue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotification {
    pub alert_id: Option<AlertId>,
    pub report_id: Option<ReportId>,
    pub channel: String,
    pub kind: NotificationKind,
}

impl NewNotification {
    pub fn for_alert(alert: &AlertId, channel: &str, kind: NotificationKind) -> Self {
        Self { alert_id: Some(alert.clone()), report_id: None, channel: channel.to_owned(), kind }
    }
}

/// A delivery as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, FromRow)]
pub struct NotificationRow {
    pub id: u64,
    pub alert_id: Option<String>,
    pub report_id: Option<String>,
    pub channel: String,
    pub kind: String,
    /// `pending`, `sent`, or `failed` (out of attempts).
    pub status: String,
    pub attempts: u32,
    pub next_attempt_at: Timestamp,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub sent_at: Option<Timestamp>,
}

pub(crate) async fn insert_notifications(conn: &mut MySqlConnection, rows: &[NewNotification], now: Timestamp) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert =
        QueryBuilder::new("INSERT INTO alert_notifications (alert_id, report_id, channel, kind, status, attempts, next_attempt_at, created_at) ");
    insert.push_values(rows, |mut row, n| {
        row.push_bind(n.alert_id.as_ref().map(|a| a.as_str().to_owned()))
            .push_bind(n.report_id.as_ref().map(|r| r.as_str().to_owned()))
            .push_bind(n.channel.clone())
            .push_bind(n.kind.as_str())
            .push_bind("pending")
            .push_bind(0u32)
            .push_bind(now)
            .push_bind(now);
    });
    insert.build().execute(conn).await.at("queue notifications")?;
    Ok(())
}

fn clip_error(error: &str) -> String {
    let mut end = error.len().min(1000);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error[..end].to_owned()
}

impl Store {
    /// Queues deliveries outside an alert transition (reports, tests).
    pub async fn queue_notifications(&self, rows: &[NewNotification]) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.at("acquire connection")?;
        insert_notifications(&mut conn, rows, ax_domain::now()).await
    }

    /// Takes up to `limit` due deliveries for `hold` (another monitor takes them
    /// back after that if this one never reports).
    pub async fn claim_notifications(&self, now: Timestamp, hold: chrono::TimeDelta, limit: u32) -> Result<Vec<NotificationRow>, StoreError> {
        let mut tx = self.pool.begin().await.at("begin claim notifications")?;
        let mut rows: Vec<NotificationRow> = sqlx::query_as(include_str!("../../queries/alerts/notification_claim.sql"))
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .at("claim notifications")?;
        if !rows.is_empty() {
            let until = now + hold;
            let mut update = QueryBuilder::new("UPDATE alert_notifications SET next_attempt_at = ");
            update.push_bind(until).push(" WHERE id IN (");
            let mut list = update.separated(", ");
            for row in &rows {
                list.push_bind(row.id);
            }
            update.push(")");
            update.build().execute(&mut *tx).await.at("hold claimed notifications")?;
            for row in &mut rows {
                row.next_attempt_at = until;
            }
        }
        tx.commit().await.at("commit claim notifications")?;
        Ok(rows)
    }

    pub async fn notification_sent(&self, id: u64, now: Timestamp) -> Result<(), StoreError> {
        sqlx::query(include_str!("../../queries/alerts/notification_sent.sql"))
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await
            .at("mark notification sent")?;
        Ok(())
    }

    /// Records a failed try: again at `retry_at`, or given up when `None`.
    pub async fn notification_failed(&self, id: u64, error: &str, retry_at: Option<Timestamp>) -> Result<(), StoreError> {
        let error = clip_error(error);
        let query = match retry_at {
            Some(at) => sqlx::query(include_str!("../../queries/alerts/notification_retry.sql")).bind(error).bind(at).bind(id),
            None => sqlx::query(include_str!("../../queries/alerts/notification_give_up.sql")).bind(error).bind(id),
        };
        query.execute(&self.pool).await.at("record notification failure")?;
        Ok(())
    }

    pub async fn notifications_of_alert(&self, alert: &AlertId) -> Result<Vec<NotificationRow>, StoreError> {
        sqlx::query_as(include_str!("../../queries/alerts/notification_of_alert.sql"))
            .bind(alert.as_str())
            .fetch_all(&self.pool)
            .await
            .at("list notifications of alert")
    }

    pub async fn pending_notifications(&self) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar(include_str!("../../queries/alerts/notification_pending_count.sql"))
            .fetch_one(&self.pool)
            .await
            .at("count pending notifications")?;
        Ok(count.max(0) as u64)
    }
}
