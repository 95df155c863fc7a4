-- Instances not yet finished, by task and state (the instances-by-state gauge).
SELECT task_name, state, COUNT(*)
FROM instances
WHERE state IN ('WAITING', 'CREATED', 'DISPATCHED', 'RUNNING', 'RETRYING')
GROUP BY task_name, state
