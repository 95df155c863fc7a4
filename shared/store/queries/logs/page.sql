-- One page of an instance's log in reading order, after a cursor.
-- Binds: instance_id, attempt filter (0 = every attempt) twice, levels (a
-- FIND_IN_SET list), cursor (attempt, ts, seq, id), limit.
SELECT id, instance_id, attempt, worker_id, seq, task_name, trace_id, level, stream, message, ts
FROM instance_logs
WHERE instance_id = ?
  AND (? = 0 OR attempt = ?)
  AND FIND_IN_SET(level, ?) > 0
  AND (attempt, ts, seq, id) > (?, ?, ?, ?)
ORDER BY attempt, ts, seq, id
LIMIT ?
