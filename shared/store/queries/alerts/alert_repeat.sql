-- The condition was seen again while its alert is open.
UPDATE alerts
SET occurrences = occurrences + 1, last_seen_at = ?, instance_id = COALESCE(?, instance_id),
    trace_id = COALESCE(?, trace_id), summary = ?, details = ?
WHERE id = ?
