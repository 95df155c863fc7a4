SELECT id, rule_name, kind, level, fingerprint, task_name, owner, instance_id, trace_id, status, summary, details, occurrences, silenced, fired_at, last_seen_at, resolved_at, notified_at, acknowledged_at, acknowledged_by, ack_comment
FROM alerts
WHERE id = ?
FOR UPDATE
