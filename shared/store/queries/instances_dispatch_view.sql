-- What a dispatch pass needs before it reads due instances, in one round trip:
-- how many instances each worker holds (DISPATCHED or RUNNING), and the RETRYING
-- instances whose next attempt is due (released to CREATED before the due read).
-- ORDER BY NULL: the counts need no order, and MariaDB sorts a GROUP BY otherwise.
(SELECT 'held' AS kind, worker_id AS ref, COUNT(*) AS n
 FROM instances FORCE INDEX (ix_instances_state)
 WHERE state IN ('DISPATCHED', 'RUNNING')
 GROUP BY worker_id
 ORDER BY NULL)
UNION ALL
(SELECT 'retry', id, 0
 FROM instances
 WHERE state = 'RETRYING' AND due_at <= ?
 ORDER BY priority, due_at
 LIMIT ?)
