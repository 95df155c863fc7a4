-- Instances finished in [since, until), by task and final state.
SELECT task_name, state, COUNT(*)
FROM instances
WHERE finished_at >= ? AND finished_at < ?
  AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DISCARDED', 'REJECTED')
GROUP BY task_name, state
