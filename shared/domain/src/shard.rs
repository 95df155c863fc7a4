//! Shards: a sharded or broadcast firing runs as one instance per shard.
//!
//! The firing's own instance (the parent) never goes to a worker: it moves to
//! `SHARDED`, the store creates its shard instances in the same transaction, and
//! it settles when the last shard ends. Each shard is an ordinary instance with its
//! own attempts, lease, retries and events, which carry [`ShardOf`].

use serde::{Deserialize, Serialize};

use crate::ids::InstanceId;

/// Which shard of which firing an instance is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShardOf {
    pub parent_id: InstanceId,
    /// 0-based, below `total`.
    pub index: u32,
    pub total: u32,
}

impl ShardOf {
    /// The trigger id that makes each shard of a firing unique, so a fan-out
    /// retried after a failed commit cannot create a shard twice.
    pub fn trigger_id(&self) -> String {
        format!("shard:{}:{}", self.parent_id, self.index)
    }
}
