//! Task versions never change once written, so the scheduler caches them forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ax_domain::ids::TaskId;
use ax_domain::task::TaskDefinition;
use ax_store::{Store, StoreError};

/// Definitions by (task, version): a version never changes once written.
type Definitions<K> = Arc<Mutex<HashMap<(K, u32), Arc<TaskDefinition>>>>;

#[derive(Clone)]
pub struct TaskCache {
    store: Store,
    versions: Definitions<TaskId>,
    by_name: Definitions<String>,
}

impl TaskCache {
    pub fn new(store: Store) -> Self {
        Self { store, versions: Arc::default(), by_name: Arc::default() }
    }

    /// The definition of `task_id` at `version`; `None` if it was never written.
    pub async fn get(&self, task_id: &TaskId, version: u32) -> Result<Option<Arc<TaskDefinition>>, StoreError> {
        let key = (task_id.clone(), version);
        if let Some(found) = self.versions.lock().expect("task cache lock").get(&key) {
            return Ok(Some(found.clone()));
        }
        let Some(definition) = self.store.task_version(task_id, version).await? else { return Ok(None) };
        let definition = Arc::new(definition);
        self.versions.lock().expect("task cache lock").insert(key, definition.clone());
        Ok(Some(definition))
    }

    /// Several versions at once, the ones not cached read in one go; versions never
    /// written are absent.
    pub async fn get_many(&self, wanted: &[(TaskId, u32)]) -> Result<HashMap<(TaskId, u32), Arc<TaskDefinition>>, StoreError> {
        let mut found = HashMap::with_capacity(wanted.len());
        let mut missing = Vec::new();
        {
            let versions = self.versions.lock().expect("task cache lock");
            for key in wanted {
                match versions.get(key) {
                    Some(definition) => {
                        found.insert(key.clone(), definition.clone());
                    }
                    None => missing.push(key.clone()),
                }
            }
        }
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(found);
        }
        let read = self.store.task_versions(&missing).await?;
        let mut versions = self.versions.lock().expect("task cache lock");
        for (task_id, version, definition) in read {
            let definition = Arc::new(definition);
            versions.insert((task_id.clone(), version), definition.clone());
            found.insert((task_id, version), definition);
        }
        Ok(found)
    }

    /// The same, by task name (what a worker's report carries).
    pub async fn get_by_name(&self, task: &str, version: u32) -> Result<Option<Arc<TaskDefinition>>, StoreError> {
        let key = (task.to_owned(), version);
        if let Some(found) = self.by_name.lock().expect("task cache lock").get(&key) {
            return Ok(Some(found.clone()));
        }
        let Some(definition) = self.store.task_version_by_name(task, version).await? else { return Ok(None) };
        let definition = Arc::new(definition);
        self.by_name.lock().expect("task cache lock").insert(key, definition.clone());
        Ok(Some(definition))
    }
}
