-- Each task's latest finished successes and failures before `until` (newest
-- first, at most `limit` per task, no older than `floor`): failure streaks.
SELECT task_name, state
FROM (
    SELECT task_name, state,
           ROW_NUMBER() OVER (PARTITION BY task_name ORDER BY finished_at DESC, id DESC) AS rn
    FROM instances
    WHERE state IN ('SUCCEEDED', 'FAILED') AND finished_at < ? AND finished_at >= ?
      AND parent_id IS NULL  -- a firing's outcome, not each of its shards'
) latest
WHERE rn <= ?
ORDER BY task_name, rn
