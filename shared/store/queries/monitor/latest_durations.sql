-- One task's latest successful runs with the seconds their last attempt ran.
SELECT id, TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) AS micros
FROM instances
WHERE task_name = ? AND finished_at IS NOT NULL AND state = 'SUCCEEDED' AND started_at IS NOT NULL
ORDER BY finished_at DESC, id DESC
LIMIT ?
