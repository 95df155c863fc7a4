SELECT id
FROM instances
WHERE state = 'RETRYING' AND due_at <= ?
ORDER BY priority, due_at
LIMIT ?
