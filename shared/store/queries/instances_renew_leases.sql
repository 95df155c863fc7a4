UPDATE instances
SET lease_expires_at = ?
WHERE worker_id = ? AND state IN ('DISPATCHED', 'RUNNING') AND lease_expires_at < ?
