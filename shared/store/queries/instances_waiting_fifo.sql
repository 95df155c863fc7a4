SELECT i.id
FROM instances i
JOIN instance_transitions t ON t.instance_id = i.id AND t.seq = 1
WHERE i.task_id = ? AND i.state = 'WAITING'
ORDER BY t.id
LIMIT ?
