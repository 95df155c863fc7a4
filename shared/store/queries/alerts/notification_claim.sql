-- Due deliveries, locked so two monitors never take the same one; the caller
-- pushes next_attempt_at forward (its claim) before committing.
SELECT id, alert_id, report_id, channel, kind, status, attempts, next_attempt_at, last_error, created_at, sent_at
FROM alert_notifications
WHERE status = 'pending' AND next_attempt_at <= ?
ORDER BY next_attempt_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED
