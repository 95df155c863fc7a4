-- Each task's latest successful runs before `until` with how long their last
-- attempt ran (newest first, at most `limit` per task, no older than `floor`).
SELECT task_name, id, finished_at, TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) AS micros
FROM (
    SELECT task_name, id, started_at, finished_at,
           ROW_NUMBER() OVER (PARTITION BY task_name ORDER BY finished_at DESC, id DESC) AS rn
    FROM instances
    WHERE state = 'SUCCEEDED' AND started_at IS NOT NULL AND finished_at < ? AND finished_at >= ?
) latest
WHERE rn <= ?
ORDER BY task_name, rn
