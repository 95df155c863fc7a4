-- The open alert of a condition, locked (or a gap lock where it would be, so two
-- monitors opening the same condition serialize).
SELECT id, rule_name, kind, level, fingerprint, task_name, owner, instance_id, trace_id, status, summary, details, occurrences, silenced, fired_at, last_seen_at, resolved_at, notified_at, acknowledged_at, acknowledged_by, ack_comment
FROM alerts
WHERE open_fingerprint = ?
FOR UPDATE
