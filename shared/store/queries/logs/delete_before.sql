-- Day-based retention: one chunk of lines older than the cutoff, so a big delete
-- never holds long locks.
DELETE FROM instance_logs
WHERE ts < ?
LIMIT ?
