//! What the task health report (seed 6) needs from MySQL, gathered per task in a
//! handful of grouped queries.

use std::collections::HashMap;

use ax_domain::event::{Event, EventBody, FlaggedTask, HealthReported};
use ax_domain::health::{HealthReport, Run, TaskStats};
use ax_domain::ids::{EventId, ReportId};
use ax_domain::Timestamp;
use sqlx::FromRow;

use crate::alerts::{NewNotification, NotificationKind};
use crate::error::{retry_busy, Context, StoreError};
use crate::outbox::OutboxEvent;
use crate::Store;

/// A stored monthly report, without its body.
#[derive(Debug, Clone, PartialEq, serde::Serialize, FromRow)]
pub struct ReportSummary {
    pub id: String,
    pub scheduled_for: Timestamp,
    pub since: Timestamp,
    pub until: Timestamp,
    pub tasks_total: u32,
    pub tasks_flagged: u32,
    pub created_at: Timestamp,
}

/// Finished runs per task the streak and duration history look at.
const HISTORY_PER_TASK: u32 = 500;
/// Streaks and histories reach back at most this far before the period.
const HISTORY_DAYS: i64 = 180;

impl Store {
    /// Every registered task with its numbers for `[since, until)`.
    pub async fn health_stats(&self, since: Timestamp, until: Timestamp) -> Result<Vec<TaskStats>, StoreError> {
        let floor = since - chrono::TimeDelta::days(HISTORY_DAYS);
        let tasks: Vec<(String, String, bool, Timestamp)> =
            sqlx::query_as(include_str!("../queries/health/tasks.sql")).fetch_all(&self.pool).await.at("list tasks for health")?;
        let mut stats: HashMap<String, TaskStats> = tasks
            .into_iter()
            .map(|(task, owner, enabled, registered_at)| {
                (task.clone(), TaskStats { task, owner, enabled, registered_at: Some(registered_at), ..Default::default() })
            })
            .collect();

        let counts: Vec<(String, String, i64)> = sqlx::query_as(include_str!("../queries/health/finished_counts.sql"))
            .bind(since)
            .bind(until)
            .fetch_all(&self.pool)
            .await
            .at("count finished instances")?;
        for (task, state, count) in counts {
            let Some(s) = stats.get_mut(&task) else { continue };
            let count = count.max(0) as u32;
            match state.as_str() {
                "SUCCEEDED" => s.succeeded += count,
                "FAILED" => s.failed += count,
                _ => s.other_finished += count,
            }
        }

        let fired: Vec<(String, Option<Timestamp>)> =
            sqlx::query_as(include_str!("../queries/health/last_fired.sql")).fetch_all(&self.pool).await.at("read last fires")?;
        for (task, at) in fired {
            if let Some(s) = stats.get_mut(&task) {
                s.last_fired_at = at;
            }
        }

        let outcomes: Vec<(String, String)> = sqlx::query_as(include_str!("../queries/health/latest_outcomes.sql"))
            .bind(until)
            .bind(floor)
            .bind(HISTORY_PER_TASK)
            .fetch_all(&self.pool)
            .await
            .at("read latest outcomes")?;
        let mut streak_over: HashMap<String, bool> = HashMap::new();
        for (task, state) in outcomes {
            let over = streak_over.entry(task.clone()).or_insert(false);
            let Some(s) = stats.get_mut(&task) else { continue };
            if *over {
                continue;
            }
            if state == "FAILED" {
                s.failure_streak += 1;
            } else {
                *over = true;
            }
        }

        let durations: Vec<(String, String, Timestamp, Option<i64>)> = sqlx::query_as(include_str!("../queries/health/durations.sql"))
            .bind(until)
            .bind(floor)
            .bind(HISTORY_PER_TASK)
            .fetch_all(&self.pool)
            .await
            .at("read run durations")?;
        for (task, id, finished_at, micros) in durations {
            let (Some(s), Some(micros), Ok(instance_id)) = (stats.get_mut(&task), micros, id.parse()) else { continue };
            s.history.push(Run { instance_id, finished_at, duration_sec: micros.max(0) as f64 / 1e6 });
        }

        let mut out: Vec<TaskStats> = stats.into_values().collect();
        out.sort_by(|a, b| a.task.cmp(&b.task));
        Ok(out)
    }
}

impl Store {
    /// Stores the report answering the cron fire `scheduled_for`, its
    /// `HealthReported` event (through the outbox, so it is published exactly once)
    /// and its deliveries to `channels`, in one transaction. `None` when that fire
    /// already has a report (another monitor made it).
    ///
    /// # Errors
    /// MySQL failures; nothing is written then.
    pub async fn save_health_report(
        &self,
        scheduled_for: Timestamp,
        report: &HealthReport,
        channels: &[String],
    ) -> Result<Option<ReportId>, StoreError> {
        let saved = retry_busy(|| async {
            let now = ax_domain::now();
            let id = ReportId::generate();
            let mut tx = self.pool.begin().await.at("begin save health report")?;
            let inserted = sqlx::query(include_str!("../queries/health/report_insert.sql"))
                .bind(id.as_str())
                .bind(scheduled_for)
                .bind(report.since)
                .bind(report.until)
                .bind(report.tasks_total)
                .bind(report.tasks_flagged)
                .bind(serde_json::to_string(report).expect("reports always serialize"))
                .bind(now)
                .execute(&mut *tx)
                .await
                .at("insert health report");
            match inserted {
                Err(StoreError::Conflict { .. }) => return Ok(None),
                other => other?,
            };
            let flagged = report
                .tasks
                .iter()
                .filter(|t| !t.flags.is_empty())
                .map(|t| FlaggedTask { task: t.task.clone(), owner: t.owner.clone(), flags: t.flags.clone() })
                .collect();
            let body = HealthReported {
                report_id: id.clone(),
                since: report.since,
                until: report.until,
                tasks_total: report.tasks_total,
                tasks_flagged: report.tasks_flagged,
                flagged,
            };
            let event = Event { id: EventId::generate(), time: now, body: EventBody::HealthReported(body) };
            let event = OutboxEvent {
                event_id: event.id.as_str().to_owned(),
                subject: self.names.report_event("health"),
                task_name: String::new(),
                instance_id: None,
                state: None,
                payload: event.encode(),
            };
            crate::outbox::append(&mut tx, &[event], now).await?;
            let rows: Vec<NewNotification> = channels
                .iter()
                .map(|c| NewNotification { alert_id: None, report_id: Some(id.clone()), channel: c.clone(), kind: NotificationKind::Report })
                .collect();
            crate::alerts::insert_notifications(&mut tx, &rows, now).await?;
            tx.commit().await.at("commit health report")?;
            Ok(Some(id))
        })
        .await?;
        if saved.is_some() {
            self.outbox_written.notify_one();
        }
        Ok(saved)
    }

    /// When the first task was registered (`None` on a fresh installation).
    pub async fn first_task_registered_at(&self) -> Result<Option<Timestamp>, StoreError> {
        sqlx::query_scalar(include_str!("../queries/health/first_task.sql")).fetch_one(&self.pool).await.at("read first registration")
    }

    pub async fn health_report_exists(&self, scheduled_for: Timestamp) -> Result<bool, StoreError> {
        let count: i64 = sqlx::query_scalar(include_str!("../queries/health/report_exists.sql"))
            .bind(scheduled_for)
            .fetch_one(&self.pool)
            .await
            .at("look for health report")?;
        Ok(count > 0)
    }

    pub async fn health_report(&self, id: &ReportId) -> Result<Option<HealthReport>, StoreError> {
        let json: Option<String> = sqlx::query_scalar(include_str!("../queries/health/report_get.sql"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .at("get health report")?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt { what: "health_reports", reason: e.to_string() })).transpose()
    }

    /// The latest stored reports, newest first.
    pub async fn health_reports(&self, limit: u32) -> Result<Vec<ReportSummary>, StoreError> {
        sqlx::query_as(include_str!("../queries/health/report_list.sql"))
            .bind(limit.clamp(1, 100))
            .fetch_all(&self.pool)
            .await
            .at("list health reports")
    }
}
