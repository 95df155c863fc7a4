SELECT worker_id, COUNT(*)
FROM instances
WHERE state IN ('DISPATCHED', 'RUNNING')
GROUP BY worker_id
