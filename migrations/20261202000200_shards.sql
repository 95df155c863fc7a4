-- Sharded and broadcast firings: the firing's instance (the parent) fans out into
-- shard instances that point at it.

-- On a shard: its parent, its 0-based index and the number of shards.
-- On a parent: shard_total only.
ALTER TABLE instances ADD COLUMN parent_id CHAR(30) NULL AFTER rerun_of;
ALTER TABLE instances ADD COLUMN shard_index INT UNSIGNED NULL AFTER parent_id;
ALTER TABLE instances ADD COLUMN shard_total INT UNSIGNED NULL AFTER shard_index;
-- On a parent: how its shards are doing, kept under the parent's row lock by the
-- transaction that ends a shard. Counting the siblings instead would need locking
-- reads of rows other shards' transactions hold, and two shards ending at once
-- would deadlock.
ALTER TABLE instances ADD COLUMN shards_open INT UNSIGNED NULL AFTER shard_total;
ALTER TABLE instances ADD COLUMN shards_failed INT UNSIGNED NOT NULL DEFAULT 0 AFTER shards_open;
ALTER TABLE instances ADD COLUMN shards_cancelled INT UNSIGNED NOT NULL DEFAULT 0 AFTER shards_failed;

CREATE INDEX ix_instances_parent ON instances (parent_id);
