//! What a batch of transitions sets off for sharded firings, in the same transaction:
//! a firing that fans out gets its shard instances; a shard that ends is counted on
//! its firing, which settles when the last one ends; a cancelled firing cancels
//! its shards.
//!
//! Lock order is shards first, then firings (in id order): the batch locked the
//! shards, and this step locks their firings after. Counting on the firing's row
//! rather than reading the siblings keeps two shards that end at once from
//! waiting on each other's rows.

use std::collections::BTreeMap;

use ax_domain::ids::InstanceId;
use ax_domain::shard::ShardOf;
use ax_domain::state::{Command, InstanceState, StateKind};
use sqlx::{MySqlConnection, QueryBuilder};

use super::create::NewInstance;
use super::transition::TransitionRequest;
use super::{InstanceRecord, InstanceRow, ShardCounts, INSTANCE_COLUMNS};
use crate::error::{Context, StoreError};
use crate::Store;

/// The shard consequences of one batch, gathered while it applies.
#[derive(Default)]
pub(crate) struct ShardWork {
    /// Firings that just moved to SHARDED, with who asked.
    fanned_out: Vec<(InstanceRecord, u32, String)>,
    /// Per firing: shards that reached a final state, by that state.
    ended: BTreeMap<InstanceId, Vec<StateKind>>,
    /// Firings cancelled while SHARDED, with the reason.
    cancelled: Vec<(InstanceId, String)>,
}

impl ShardWork {
    pub(crate) fn note(&mut self, before: &InstanceRecord, after: &InstanceRecord, command: &Command, operator: &str) {
        if let (Command::FanOut { total }, InstanceState::Sharded(_)) = (command, &after.state) {
            self.fanned_out.push((after.clone(), *total, operator.to_owned()));
        }
        if let Some(shard) = &after.shard
            && after.state.kind().is_final() && !before.state.kind().is_final()
        {
            self.ended.entry(shard.parent_id.clone()).or_default().push(after.state.kind());
        }
        if let (InstanceState::Sharded(_), Command::Cancel { reason }) = (&before.state, command) {
            self.cancelled.push((before.id.clone(), reason.clone()));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fanned_out.is_empty() && self.ended.is_empty() && self.cancelled.is_empty()
    }
}

impl Store {
    /// Carries out `work` inside the batch's transaction.
    pub(crate) async fn follow_shards(&self, tx: &mut MySqlConnection, work: ShardWork) -> Result<(), StoreError> {
        for (parent, total, operator) in &work.fanned_out {
            self.create_shards(&mut *tx, parent, *total, operator).await?;
        }
        if !work.cancelled.is_empty() {
            self.cancel_shards(&mut *tx, &work.cancelled).await?;
        }
        if !work.ended.is_empty() {
            self.count_ended_shards(&mut *tx, &work.ended).await?;
        }
        Ok(())
    }

    async fn create_shards(&self, tx: &mut MySqlConnection, parent: &InstanceRecord, total: u32, operator: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE instances SET shard_total = ?, shards_open = ?, shards_failed = 0, shards_cancelled = 0 WHERE id = ?")
            .bind(total)
            .bind(total)
            .bind(parent.id.as_str())
            .execute(&mut *tx)
            .await
            .at("record fan-out")?;
        let now = ax_domain::now();
        let shards: Vec<NewInstance> = (0..total)
            .map(|index| {
                let shard = ShardOf { parent_id: parent.id.clone(), index, total };
                NewInstance {
                    task_id: parent.task_id.clone(),
                    task_name: parent.task_name.clone(),
                    task_version: parent.task_version,
                    trigger_type: parent.trigger_type,
                    trigger_id: shard.trigger_id(),
                    params: parent.params.clone(),
                    payload_version: parent.payload_version,
                    priority: parent.priority,
                    due_at: now,
                    initial: StateKind::Created,
                    reason: format!("shard {index} of {total}"),
                    operator: operator.to_owned(),
                    // The firing took the task's concurrency slot; its shards share it.
                    concurrency: None,
                    shard: Some(shard),
                }
            })
            .collect();
        Box::pin(self.create_in(&mut *tx, &shards)).await?;
        Ok(())
    }

    async fn cancel_shards(&self, tx: &mut MySqlConnection, firings: &[(InstanceId, String)]) -> Result<(), StoreError> {
        let mut select = QueryBuilder::new("SELECT id, parent_id FROM instances WHERE parent_id IN (");
        let mut list = select.separated(", ");
        for (id, _) in crate::shapes::padded(firings) {
            list.push_bind(id.as_str().to_owned());
        }
        select.push(") AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DISCARDED', 'REJECTED')");
        let open: Vec<(String, String)> = select.build_query_as().fetch_all(&mut *tx).await.at("list open shards")?;
        let requests: Vec<TransitionRequest> = open
            .into_iter()
            .filter_map(|(id, parent)| {
                let reason = firings.iter().find(|(f, _)| f.as_str() == parent).map_or("", |(_, r)| r.as_str());
                Some(TransitionRequest {
                    instance_id: id.parse().ok()?,
                    command: Command::Cancel { reason: format!("firing {parent} cancelled: {reason}") },
                    operator: "shards".into(),
                    result: None,
                })
            })
            .collect();
        // Refusals are shards that ended meanwhile under their own lock: nothing to do.
        Box::pin(self.apply_in(&mut *tx, &requests)).await?;
        Ok(())
    }

    async fn count_ended_shards(&self, tx: &mut MySqlConnection, ended: &BTreeMap<InstanceId, Vec<StateKind>>) -> Result<(), StoreError> {
        let mut select = QueryBuilder::new(format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id IN ("));
        let mut list = select.separated(", ");
        let firings: Vec<&InstanceId> = ended.keys().collect();
        for id in crate::shapes::padded(&firings) {
            list.push_bind(id.as_str().to_owned());
        }
        select.push(") ORDER BY id FOR UPDATE");
        let rows: Vec<InstanceRow> = select.build_query_as().fetch_all(&mut *tx).await.at("lock sharded firings")?;
        let mut settle = Vec::new();
        for row in rows {
            let firing = InstanceRecord::try_from(row)?;
            let Some(counts) = firing.shards else {
                return Err(StoreError::Corrupt { what: "instances", reason: format!("{} has shards but no shard counts", firing.id) });
            };
            let states = &ended[&firing.id];
            let failed = states.iter().filter(|s| **s == StateKind::Failed).count() as u32;
            let cancelled = states.iter().filter(|s| **s == StateKind::Cancelled).count() as u32;
            let counts = ShardCounts {
                total: counts.total,
                open: counts.open.saturating_sub(states.len() as u32),
                failed: counts.failed + failed,
                cancelled: counts.cancelled + cancelled,
            };
            sqlx::query("UPDATE instances SET shards_open = ?, shards_failed = ?, shards_cancelled = ? WHERE id = ?")
                .bind(counts.open)
                .bind(counts.failed)
                .bind(counts.cancelled)
                .bind(firing.id.as_str())
                .execute(&mut *tx)
                .await
                .at("count ended shards")?;
            if counts.open == 0 && matches!(firing.state, InstanceState::Sharded(_)) {
                let (outcome, reason) = settlement(counts);
                settle.push(TransitionRequest {
                    instance_id: firing.id.clone(),
                    command: Command::Settle { outcome, reason },
                    operator: "shards".into(),
                    result: None,
                });
            }
        }
        Box::pin(self.apply_in(&mut *tx, &settle)).await?;
        Ok(())
    }
}

/// How a firing ends once every shard has: any failure fails it, else any
/// cancellation cancels it.
fn settlement(counts: ShardCounts) -> (StateKind, String) {
    let ShardCounts { total, failed, cancelled, .. } = counts;
    let succeeded = total - failed - cancelled;
    let tally = format!("{succeeded} of {total} shards succeeded, {failed} failed, {cancelled} cancelled");
    if failed > 0 {
        (StateKind::Failed, tally)
    } else if cancelled > 0 {
        (StateKind::Cancelled, tally)
    } else {
        (StateKind::Succeeded, tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_failed_shard_fails_the_firing_even_beside_a_cancelled_one() {
        let counts = ShardCounts { total: 4, open: 0, failed: 1, cancelled: 1 };
        assert_eq!(settlement(counts).0, StateKind::Failed);
        assert_eq!(settlement(counts).1, "2 of 4 shards succeeded, 1 failed, 1 cancelled");
    }

    #[test]
    fn a_cancelled_shard_without_failures_cancels_the_firing() {
        assert_eq!(settlement(ShardCounts { total: 3, open: 0, failed: 0, cancelled: 1 }).0, StateKind::Cancelled);
    }

    #[test]
    fn every_shard_succeeding_succeeds_the_firing() {
        assert_eq!(settlement(ShardCounts { total: 3, open: 0, failed: 0, cancelled: 0 }).0, StateKind::Succeeded);
    }
}
