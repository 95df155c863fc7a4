-- Instances finished in [since, until), by task and final state.
SELECT task_name, state, COUNT(*)
FROM instances
WHERE finished_at >= ? AND finished_at < ?
  AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DISCARDED', 'REJECTED')
  AND parent_id IS NULL  -- firings, not their shards
GROUP BY task_name, state
