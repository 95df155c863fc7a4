SELECT id
FROM instances
WHERE task_id = ? AND state IN ('CREATED', 'DISPATCHED', 'RUNNING', 'RETRYING', 'SHARDED') AND parent_id IS NULL
ORDER BY id
