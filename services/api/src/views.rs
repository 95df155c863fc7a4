//! The JSON the API answers with.

use ax_store::{InstanceRecord, TaskRecord};
use serde_json::{json, Value};

pub fn task(task: &TaskRecord) -> Value {
    json!({
        "id": task.id,
        "name": task.name,
        "version": task.version,
        "enabled": task.enabled,
        "definition": task.definition,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
    })
}

/// A fanned-out firing with each of its shards (state, attempt, worker).
pub fn firing(i: &InstanceRecord, shards: &[InstanceRecord]) -> Value {
    let mut view = instance(i);
    view["shard_instances"] = shards
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "index": s.shard.as_ref().map(|x| x.index),
                "state": s.state.kind(),
                "attempt": s.attempt,
                "worker_id": s.state.worker_id().or(s.last_worker_id.as_ref()),
                "reason": s.reason,
            })
        })
        .collect();
    view
}

pub fn instance(i: &InstanceRecord) -> Value {
    json!({
        "id": i.id,
        "task": i.task_name,
        "task_version": i.task_version,
        "state": i.state.kind(),
        "attempt": i.attempt,
        "seq": i.seq,
        "trigger_type": i.trigger_type,
        "trigger_id": i.trigger_id,
        "trace_id": i.trace_id,
        "params": i.params,
        "payload_version": i.payload_version,
        "priority": i.priority,
        "due_at": i.due_at,
        "worker_id": i.state.worker_id().or(i.last_worker_id.as_ref()),
        "lease_expires_at": i.state.lease_expires_at(),
        "started_at": i.started_at,
        "finished_at": i.finished_at,
        "reason": i.reason,
        "result": i.result,
        "progress": i.progress.as_ref().map(|(percent, message)| json!({ "percent": percent, "message": message })),
        "rerun_of": i.rerun_of,
        // On a shard: which firing and which shard; on a firing that fanned out: its shards' tally.
        "shard": i.shard,
        "shards": i.shards,
        "created_at": i.created_at,
        "updated_at": i.updated_at,
    })
}
