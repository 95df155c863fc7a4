//! Waiting instances take freed slots, oldest first (the `serial` strategy).

use ax_domain::ids::TaskId;
use ax_domain::state::Command;
use ax_domain::task::TaskDefinition;

use super::transition::{Applied, TransitionRequest};
use crate::error::{retry_busy, Context, StoreError};
use crate::Store;

impl Store {
    /// Moves as many WAITING instances of `task_id` to CREATED as its limit now
    /// allows, under the task row's lock (the same lock creation decides under).
    pub async fn release_waiting(&self, task_id: &TaskId) -> Result<Vec<Applied>, StoreError> {
        let released = retry_busy(|| async {
            let mut tx = self.pool.begin().await.at("begin release waiting")?;
            let definition: Option<String> = sqlx::query_scalar("SELECT definition FROM tasks WHERE id = ? FOR UPDATE")
                .bind(task_id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .at("lock task for release")?;
            let Some(definition) = definition else { return Ok(Vec::new()) };
            let definition: TaskDefinition = serde_json::from_str(&definition)
                .map_err(|e| StoreError::Corrupt { what: "tasks", reason: e.to_string() })?;
            let active: Vec<String> = sqlx::query_scalar(include_str!("../../queries/instances_active_of_task.sql"))
                .bind(task_id.as_str())
                .fetch_all(&mut *tx)
                .await
                .at("count active instances")?;
            // A limit removed by an update frees every waiting instance.
            let max = definition.concurrency.max_running_instances.map_or(u32::MAX as usize, |m| m as usize);
            let free = max.saturating_sub(active.len()).min(1000);
            if free == 0 {
                return Ok(Vec::new());
            }
            // FIFO by admission: the audit row of the WAITING birth was written under
            // the task lock, so its id orders admissions exactly.
            let waiting: Vec<String> = sqlx::query_scalar(include_str!("../../queries/instances_waiting_fifo.sql"))
                .bind(task_id.as_str())
                .bind(free as u32)
                .fetch_all(&mut *tx)
                .await
                .at("pick waiting instances")?;
            let requests: Vec<TransitionRequest> = waiting
                .into_iter()
                .filter_map(|id| id.parse().ok())
                .map(|instance_id| TransitionRequest { instance_id, command: Command::Release, operator: "concurrency".into(), result: None })
                .collect();
            let outcomes = self.apply_in(&mut tx, &requests).await?;
            tx.commit().await.at("commit release waiting")?;
            Ok(outcomes.into_iter().filter_map(Result::ok).collect::<Vec<_>>())
        })
        .await?;
        if !released.is_empty() {
            self.outbox_written.notify_one();
        }
        Ok(released)
    }

    /// Tasks that have WAITING instances (for the periodic release sweep).
    pub async fn tasks_with_waiting(&self) -> Result<Vec<TaskId>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT DISTINCT task_id FROM instances WHERE state = 'WAITING' LIMIT 1000")
            .fetch_all(&self.pool)
            .await
            .at("list tasks with waiting instances")?;
        Ok(ids.into_iter().filter_map(|id| id.parse().ok()).collect())
    }
}
