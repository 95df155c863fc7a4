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
        "created_at": i.created_at,
        "updated_at": i.updated_at,
    })
}
