//! Alerts: one per condition from firing to resolved, with the notifications that
//! were decided in the same transaction.
//!
//! # Contract
//! - A condition (its fingerprint: rule and task) has at most one open alert, across
//!   any number of monitors (`uk_alerts_open`).
//! - Opening an alert notifies unless the condition notified within the rule's
//!   silence window; then the alert is recorded, marked silenced, and sends nothing.
//! - Resolving notifies "recovered" exactly when the firing was notified.
//! - An open, unacknowledged alert that keeps firing reminds once per silence window.

use ax_domain::alert::{AlertLevel, AlertRule};
use ax_domain::ids::{AlertId, InstanceId, TraceId};
use ax_domain::Timestamp;
use sqlx::{FromRow, MySqlConnection, QueryBuilder};

use super::notifications::{insert_notifications, NewNotification, NotificationKind};
use crate::error::{retry_busy, Context, StoreError};
use crate::Store;

const COLUMNS: &str = "id, rule_name, kind, level, fingerprint, task_name, owner, instance_id, trace_id, status, summary, \
     details, occurrences, silenced, fired_at, last_seen_at, resolved_at, notified_at, acknowledged_at, acknowledged_by, ack_comment";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "firing" => Some(AlertStatus::Firing),
            "resolved" => Some(AlertStatus::Resolved),
            _ => None,
        }
    }
}

/// An alert as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AlertRecord {
    pub id: AlertId,
    pub rule: String,
    pub kind: String,
    pub level: AlertLevel,
    pub fingerprint: String,
    pub task: Option<String>,
    pub owner: Option<String>,
    pub instance_id: Option<String>,
    pub trace_id: Option<String>,
    pub status: AlertStatus,
    pub summary: String,
    pub details: serde_json::Value,
    /// How often the condition was seen while this alert was open.
    pub occurrences: u32,
    /// Opened inside the silence window of an earlier notification: sent nothing.
    pub silenced: bool,
    pub fired_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    pub notified_at: Option<Timestamp>,
    pub acknowledged_at: Option<Timestamp>,
    pub acknowledged_by: Option<String>,
    pub ack_comment: Option<String>,
}

#[derive(FromRow)]
struct AlertRow {
    id: String,
    rule_name: String,
    kind: String,
    level: String,
    fingerprint: String,
    task_name: Option<String>,
    owner: Option<String>,
    instance_id: Option<String>,
    trace_id: Option<String>,
    status: String,
    summary: String,
    details: String,
    occurrences: u32,
    silenced: bool,
    fired_at: Timestamp,
    last_seen_at: Timestamp,
    resolved_at: Option<Timestamp>,
    notified_at: Option<Timestamp>,
    acknowledged_at: Option<Timestamp>,
    acknowledged_by: Option<String>,
    ack_comment: Option<String>,
}

impl TryFrom<AlertRow> for AlertRecord {
    type Error = StoreError;
    fn try_from(row: AlertRow) -> Result<Self, StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt { what: "alerts", reason: format!("{}: {reason}", row.id) };
        Ok(Self {
            id: row.id.parse().map_err(|e: ax_domain::ids::InvalidId| corrupt(e.to_string()))?,
            level: AlertLevel::parse(&row.level).ok_or_else(|| corrupt(format!("level {}", row.level)))?,
            status: AlertStatus::parse(&row.status).ok_or_else(|| corrupt(format!("status {}", row.status)))?,
            details: serde_json::from_str(&row.details).map_err(|e| corrupt(format!("details: {e}")))?,
            rule: row.rule_name,
            kind: row.kind,
            fingerprint: row.fingerprint,
            task: row.task_name,
            owner: row.owner,
            instance_id: row.instance_id,
            trace_id: row.trace_id,
            summary: row.summary,
            occurrences: row.occurrences,
            silenced: row.silenced,
            fired_at: row.fired_at,
            last_seen_at: row.last_seen_at,
            resolved_at: row.resolved_at,
            notified_at: row.notified_at,
            acknowledged_at: row.acknowledged_at,
            acknowledged_by: row.acknowledged_by,
            ack_comment: row.ack_comment,
        })
    }
}

/// A condition seen true.
#[derive(Debug, Clone)]
pub struct Firing<'a> {
    pub rule: &'a AlertRule,
    /// The condition: `rule` or `rule:task`.
    pub fingerprint: String,
    pub task: Option<String>,
    pub owner: Option<String>,
    pub instance_id: Option<InstanceId>,
    pub trace_id: Option<TraceId>,
    pub summary: String,
    pub details: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireOutcome {
    /// A new alert; `notified` is false when it fell in the silence window.
    Opened { id: AlertId, notified: bool },
    /// The condition's alert was already open; it counted one more occurrence.
    Repeated { id: AlertId },
}

/// Which alerts to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    pub status: Option<AlertStatus>,
    pub level: Option<AlertLevel>,
    pub task: Option<String>,
    pub rule: Option<String>,
    /// Only alerts older than this one (paging).
    pub before: Option<AlertId>,
    pub limit: u32,
}

fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

async fn lock_open(conn: &mut MySqlConnection, fingerprint: &str) -> Result<Option<AlertRecord>, StoreError> {
    let row: Option<AlertRow> = sqlx::query_as(include_str!("../../queries/alerts/alert_lock_open.sql"))
        .bind(fingerprint)
        .fetch_optional(conn)
        .await
        .at("lock open alert")?;
    row.map(AlertRecord::try_from).transpose()
}

async fn last_notified(conn: &mut MySqlConnection, fingerprint: &str) -> Result<Option<Timestamp>, StoreError> {
    sqlx::query_scalar(include_str!("../../queries/alerts/alert_last_notified.sql"))
        .bind(fingerprint)
        .fetch_one(conn)
        .await
        .at("read last notification")
}

fn in_silence(last: Option<Timestamp>, silence_sec: u64, now: Timestamp) -> bool {
    let window = chrono::TimeDelta::seconds(silence_sec.min(i64::MAX as u64) as i64);
    last.is_some_and(|last| last + window > now)
}

impl Store {
    /// Records that a condition is true, opening its alert if none is open, and
    /// queues its notifications to `channels` unless silenced (see the module contract).
    ///
    /// # Errors
    /// MySQL failures; nothing is written then.
    pub async fn fire_alert(&self, firing: &Firing<'_>, channels: &[String], now: Timestamp) -> Result<FireOutcome, StoreError> {
        retry_busy(|| async {
            match self.fire_once(firing, channels, now).await {
                // Another monitor opened it between our lock and insert: look again.
                Err(StoreError::Conflict { .. }) => Err(StoreError::Busy { what: "open alert" }),
                other => other,
            }
        })
        .await
    }

    async fn fire_once(&self, firing: &Firing<'_>, channels: &[String], now: Timestamp) -> Result<FireOutcome, StoreError> {
        let mut tx = self.pool.begin().await.at("begin fire alert")?;
        let summary = clip(&firing.summary, 1000);
        let details = firing.details.to_string();
        if let Some(open) = lock_open(&mut tx, &firing.fingerprint).await? {
            sqlx::query(include_str!("../../queries/alerts/alert_repeat.sql"))
                .bind(now)
                .bind(firing.instance_id.as_ref().map(|i| i.as_str().to_owned()))
                .bind(firing.trace_id.as_ref().map(|t| t.as_str().to_owned()))
                .bind(&summary)
                .bind(&details)
                .bind(open.id.as_str())
                .execute(&mut *tx)
                .await
                .at("count alert occurrence")?;
            tx.commit().await.at("commit alert occurrence")?;
            return Ok(FireOutcome::Repeated { id: open.id });
        }
        let silenced = in_silence(last_notified(&mut tx, &firing.fingerprint).await?, firing.rule.silence_sec, now);
        let id = AlertId::generate();
        sqlx::query(include_str!("../../queries/alerts/alert_insert.sql"))
            .bind(id.as_str())
            .bind(&firing.rule.name)
            .bind(firing.rule.kind.as_str())
            .bind(firing.rule.level().as_str())
            .bind(&firing.fingerprint)
            .bind(&firing.fingerprint)
            .bind(&firing.task)
            .bind(&firing.owner)
            .bind(firing.instance_id.as_ref().map(|i| i.as_str().to_owned()))
            .bind(firing.trace_id.as_ref().map(|t| t.as_str().to_owned()))
            .bind(&summary)
            .bind(&details)
            .bind(silenced)
            .bind(now)
            .bind(now)
            .bind((!silenced).then_some(now))
            .execute(&mut *tx)
            .await
            .at("open alert")?;
        if !silenced {
            let rows: Vec<NewNotification> =
                channels.iter().map(|c| NewNotification::for_alert(&id, c, NotificationKind::Firing)).collect();
            insert_notifications(&mut tx, &rows, now).await?;
        }
        tx.commit().await.at("commit open alert")?;
        Ok(FireOutcome::Opened { id, notified: !silenced })
    }

    /// Closes the condition's open alert, if any, and queues "recovered" to
    /// `channels` when its firing was notified. Returns the alert and whether it
    /// notified.
    ///
    /// # Errors
    /// MySQL failures; nothing is written then.
    pub async fn resolve_alert(&self, fingerprint: &str, channels: &[String], now: Timestamp) -> Result<Option<(AlertId, bool)>, StoreError> {
        retry_busy(|| async {
            let mut tx = self.pool.begin().await.at("begin resolve alert")?;
            let Some(open) = lock_open(&mut tx, fingerprint).await? else {
                tx.commit().await.at("commit resolve alert")?;
                return Ok(None);
            };
            sqlx::query(include_str!("../../queries/alerts/alert_resolve.sql"))
                .bind(now)
                .bind(open.id.as_str())
                .execute(&mut *tx)
                .await
                .at("resolve alert")?;
            let notify = open.notified_at.is_some();
            if notify {
                let rows: Vec<NewNotification> =
                    channels.iter().map(|c| NewNotification::for_alert(&open.id, c, NotificationKind::Resolved)).collect();
                insert_notifications(&mut tx, &rows, now).await?;
            }
            tx.commit().await.at("commit resolve alert")?;
            Ok(Some((open.id, notify)))
        })
        .await
    }

    /// Reminds of an open, unacknowledged alert that was seen since its last
    /// notification, once the condition's silence window is over. A silenced alert
    /// that keeps firing gets its first notification this way. Returns whether it
    /// queued anything.
    ///
    /// # Errors
    /// MySQL failures.
    pub async fn remind_alert(&self, id: &AlertId, silence_sec: u64, channels: &[String], now: Timestamp) -> Result<bool, StoreError> {
        retry_busy(|| async {
            let mut tx = self.pool.begin().await.at("begin remind alert")?;
            let row: Option<AlertRow> = sqlx::query_as(include_str!("../../queries/alerts/alert_lock.sql"))
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .at("lock alert")?;
            let Some(alert) = row.map(AlertRecord::try_from).transpose()? else { return Ok(false) };
            let seen_since = alert.last_seen_at > alert.notified_at.unwrap_or(alert.fired_at);
            let due = alert.status == AlertStatus::Firing
                && alert.acknowledged_at.is_none()
                && seen_since
                && !in_silence(last_notified(&mut tx, &alert.fingerprint).await?, silence_sec, now);
            if !due {
                tx.commit().await.at("commit remind alert")?;
                return Ok(false);
            }
            sqlx::query(include_str!("../../queries/alerts/alert_notified.sql"))
                .bind(now)
                .bind(alert.id.as_str())
                .execute(&mut *tx)
                .await
                .at("mark alert notified")?;
            let kind = if alert.notified_at.is_some() { NotificationKind::Reminder } else { NotificationKind::Firing };
            let rows: Vec<NewNotification> = channels.iter().map(|c| NewNotification::for_alert(&alert.id, c, kind)).collect();
            insert_notifications(&mut tx, &rows, now).await?;
            tx.commit().await.at("commit remind alert")?;
            Ok(true)
        })
        .await
    }

    /// Every open alert, oldest first.
    pub async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<AlertRow> =
            sqlx::query_as(include_str!("../../queries/alerts/alert_open.sql")).fetch_all(&self.pool).await.at("list open alerts")?;
        rows.into_iter().map(AlertRecord::try_from).collect()
    }

    pub async fn alert(&self, id: &AlertId) -> Result<Option<AlertRecord>, StoreError> {
        let row: Option<AlertRow> = sqlx::query_as(include_str!("../../queries/alerts/alert_get.sql"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .at("get alert")?;
        row.map(AlertRecord::try_from).transpose()
    }

    /// Alert history, newest first.
    pub async fn alerts(&self, filter: &AlertFilter) -> Result<Vec<AlertRecord>, StoreError> {
        let mut query = QueryBuilder::new(format!("SELECT {COLUMNS} FROM alerts WHERE 1 = 1"));
        if let Some(status) = filter.status {
            query.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(level) = filter.level {
            query.push(" AND level = ").push_bind(level.as_str());
        }
        if let Some(task) = &filter.task {
            query.push(" AND task_name = ").push_bind(task.clone());
        }
        if let Some(rule) = &filter.rule {
            query.push(" AND rule_name = ").push_bind(rule.clone());
        }
        if let Some(before) = &filter.before {
            query.push(" AND id < ").push_bind(before.as_str().to_owned());
        }
        query.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit.clamp(1, 1000));
        let rows: Vec<AlertRow> = query.build_query_as().fetch_all(&self.pool).await.at("list alerts")?;
        rows.into_iter().map(AlertRecord::try_from).collect()
    }

    /// Marks an alert as seen by someone: no more reminders. `None` if it does not exist.
    pub async fn acknowledge_alert(&self, id: &AlertId, by: &str, comment: Option<&str>, now: Timestamp) -> Result<Option<AlertRecord>, StoreError> {
        sqlx::query(include_str!("../../queries/alerts/alert_ack.sql"))
            .bind(now)
            .bind(clip(by, 128))
            .bind(comment.map(|c| clip(c, 1024)))
            .bind(id.as_str())
            .execute(&self.pool)
            .await
            .at("acknowledge alert")?;
        self.alert(id).await
    }
}
