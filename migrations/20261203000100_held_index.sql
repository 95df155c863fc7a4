-- The dispatcher counts each worker's DISPATCHED and RUNNING instances on every
-- pass (`instances_held_by_worker.sql`). With the index led by worker_id, MariaDB
-- answered the GROUP BY by scanning the whole index, finished instances included:
-- 150 index entries read per instance in the throughput benchmark, and a cost that
-- grows with the table. Led by state, the count reads only the held entries.
-- The other queries by worker name their instances by id.
DROP INDEX ix_instances_worker ON instances;
CREATE INDEX ix_instances_held ON instances (state, worker_id);
