//! What the task health report (seed 6) needs from MySQL, gathered per task in a
//! handful of grouped queries.

use std::collections::HashMap;

use ax_domain::health::{Run, TaskStats};
use ax_domain::Timestamp;

use crate::error::{Context, StoreError};
use crate::Store;

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
