-- One index for the instances a worker holds (DISPATCHED and RUNNING), led by state.
--
-- The dispatcher counts each worker's held instances on every pass
-- (`instances_held_by_worker.sql`). With the index led by worker_id, MariaDB
-- answered that GROUP BY by scanning the whole index, finished instances included:
-- 150 index entries read per instance in the throughput benchmark, and a cost that
-- grows with the table.
--
-- The reaper's two reads (expired leases, attempts past their deadline) look only
-- at held instances too, whose number is bounded by the workers' slots; one index
-- serves all three, where three separate ones each changed on every transition.
-- The other queries by worker name their instances by id.
DROP INDEX ix_instances_worker ON instances;
DROP INDEX ix_instances_lease ON instances;
DROP INDEX ix_instances_deadline ON instances;
CREATE INDEX ix_instances_held ON instances (state, worker_id, lease_expires_at, deadline_at);
