-- Instances ready to run (CREATED and due) since before the cutoff, by task, with
-- the oldest due time (seed 5.4, backlog older than 5 minutes).
SELECT task_name, COUNT(*), MIN(due_at)
FROM instances
WHERE state = 'CREATED' AND due_at < ?
GROUP BY task_name
