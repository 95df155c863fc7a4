UPDATE instances
SET state = ?, attempt = ?, seq = ?, worker_id = ?, lease_expires_at = ?, deadline_at = ?, started_at = ?,
    finished_at = ?, due_at = ?, reason = ?, result = COALESCE(?, result), updated_at = ?
WHERE id = ? AND state = ? AND attempt = ?
