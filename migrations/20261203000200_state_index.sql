-- One index for every read by state: the ready reads (CREATED and RETRYING by
-- priority and due time) and the held reads (DISPATCHED and RUNNING by worker,
-- lease and deadline).
--
-- Both former indexes led with `state`, so every transition deleted and inserted
-- an entry in each: two of the three secondary-index changes a transition makes.
-- The held reads look only at held instances, whose number is bounded by the
-- workers' slots, so they lose nothing by scanning the held states' range of
-- this index instead of their own; the ready reads keep their (state, priority,
-- due_at) prefix and its order.
--
-- `trigger_type` (never changed after the insert) closes it for the timer's
-- future-due read, which tells cron fires created ahead from other instances: it
-- reads the index alone instead of looking up every row it returns.
ALTER TABLE instances
    DROP INDEX ix_instances_ready,
    DROP INDEX ix_instances_held,
    ADD INDEX ix_instances_state (state, priority, due_at, worker_id, lease_expires_at, deadline_at, trigger_type);
