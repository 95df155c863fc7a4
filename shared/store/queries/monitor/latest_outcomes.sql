-- One task's latest finished successes and failures, newest first
-- (index ix_instances_task_finished): consecutive failures.
SELECT id, state, reason, trace_id, finished_at
FROM instances
WHERE task_name = ? AND finished_at IS NOT NULL AND state IN ('SUCCEEDED', 'FAILED')
  AND parent_id IS NULL  -- a firing's outcome, not each of its shards'
ORDER BY finished_at DESC, id DESC
LIMIT ?
