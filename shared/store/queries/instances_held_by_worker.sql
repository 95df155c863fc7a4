-- ORDER BY NULL: the counts need no order, and MariaDB sorts a GROUP BY otherwise.
SELECT worker_id, COUNT(*)
FROM instances FORCE INDEX (ix_instances_held)
WHERE state IN ('DISPATCHED', 'RUNNING')
GROUP BY worker_id
ORDER BY NULL
