//! Chain edges: "when an instance of U ends (succeeded / failed / finished), fire D".
//! Kept in `chain_edges` beside the definitions; a registration that would close a
//! cycle is refused with the cycle named.

use std::collections::HashMap;

use ax_domain::ids::TaskId;
use ax_domain::task::{ChainOn, TaskDefinition, TriggerSpec};
use sqlx::MySqlConnection;

use crate::error::{Context, StoreError};
use crate::Store;

/// A task to fire when an upstream instance ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Downstream {
    pub task_id: TaskId,
    pub task_name: String,
    pub trigger_index: u16,
    pub on: ChainOn,
}

fn chain_triggers(definition: &TaskDefinition) -> Vec<(u16, &str, ChainOn)> {
    definition
        .triggers
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            TriggerSpec::Chain { after, on } => Some((i as u16, after.as_str(), *on)),
            _ => None,
        })
        .collect()
}

fn on_token(on: ChainOn) -> &'static str {
    match on {
        ChainOn::Succeeded => "succeeded",
        ChainOn::Failed => "failed",
        ChainOn::Finished => "finished",
    }
}

/// Replaces the task's edges, refusing a cycle. Serialized on the `chain_graph` lock
/// row so two registrations cannot each close half of a cycle.
pub(crate) async fn sync_edges(
    tx: &mut MySqlConnection,
    task_id: &TaskId,
    definition: &TaskDefinition,
    previous: Option<&TaskDefinition>,
) -> Result<(), StoreError> {
    let new_edges = chain_triggers(definition);
    let had_edges = previous.is_some_and(|p| !chain_triggers(p).is_empty());
    if new_edges.is_empty() && !had_edges {
        return Ok(());
    }
    sqlx::query("SELECT name FROM store_locks WHERE name = 'chain_graph' FOR UPDATE").execute(&mut *tx).await.at("lock chain graph")?;
    sqlx::query("DELETE FROM chain_edges WHERE downstream_id = ?").bind(task_id.as_str()).execute(&mut *tx).await.at("drop chain edges")?;
    if new_edges.is_empty() {
        return Ok(());
    }
    // upstream -> downstreams, as the graph stands without this task's old edges.
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT upstream_name, downstream_name FROM chain_edges").fetch_all(&mut *tx).await.at("read chain graph")?;
    let mut graph: HashMap<String, Vec<String>> = HashMap::new();
    for (up, down) in rows {
        graph.entry(up).or_default().push(down);
    }
    let me = definition.task_name.as_str();
    for (index, after, _) in &new_edges {
        // The new edge after -> me closes a cycle iff me already reaches after.
        if let Some(path) = find_path(&graph, me, after) {
            let cycle = std::iter::once(after.to_string()).chain(path).collect::<Vec<_>>().join(" -> ");
            return Err(StoreError::Refused { field: format!("triggers[{index}].after"), reason: format!("chain would make a cycle: {cycle}") });
        }
    }
    for (index, after, on) in &new_edges {
        sqlx::query("INSERT INTO chain_edges (upstream_name, downstream_id, downstream_name, trigger_index, on_state) VALUES (?, ?, ?, ?, ?)")
            .bind(*after)
            .bind(task_id.as_str())
            .bind(me)
            .bind(*index)
            .bind(on_token(*on))
            .execute(&mut *tx)
            .await
            .at("insert chain edge")?;
    }
    Ok(())
}

/// A path from `from` to `to` (both included), depth first.
fn find_path(graph: &HashMap<String, Vec<String>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_owned(), vec![from.to_owned()])];
    let mut seen = std::collections::HashSet::new();
    while let Some((node, path)) = stack.pop() {
        if node == to {
            return Some(path);
        }
        if !seen.insert(node.clone()) {
            continue;
        }
        for next in graph.get(&node).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push((next.clone(), longer));
        }
    }
    None
}

impl Store {
    /// The tasks chained after `upstream`.
    pub async fn downstream_of(&self, upstream: &str) -> Result<Vec<Downstream>, StoreError> {
        let rows: Vec<(String, String, u16, String)> = sqlx::query_as(
            "SELECT e.downstream_id, e.downstream_name, e.trigger_index, e.on_state FROM chain_edges e \
             JOIN tasks t ON t.id = e.downstream_id WHERE e.upstream_name = ? AND t.deleted_at IS NULL",
        )
        .bind(upstream)
        .fetch_all(&self.pool)
        .await
        .at("read downstream tasks")?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, name, index, on)| {
                let on = match on.as_str() {
                    "succeeded" => ChainOn::Succeeded,
                    "failed" => ChainOn::Failed,
                    _ => ChainOn::Finished,
                };
                Some(Downstream { task_id: id.parse().ok()?, task_name: name, trigger_index: index, on })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_found_and_named() {
        let mut graph = HashMap::new();
        graph.insert("a".to_owned(), vec!["b".to_owned()]);
        graph.insert("b".to_owned(), vec!["c".to_owned()]);
        assert_eq!(find_path(&graph, "a", "c"), Some(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(find_path(&graph, "c", "a"), None);
    }
}
