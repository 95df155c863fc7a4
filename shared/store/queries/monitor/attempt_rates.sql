-- Per task since a time: attempts that ended, those that ended by a timeout
-- (the words ax_domain::attempt::is_timeout looks for), and instances that
-- succeeded or failed for good. Feeds the timeout_rate and failure_rate rules.
SELECT task_name,
       CAST(SUM(CASE WHEN from_state IN ('DISPATCHED', 'RUNNING') AND to_state <> 'RUNNING' THEN 1 ELSE 0 END) AS SIGNED) AS attempts,
       CAST(SUM(CASE WHEN from_state IN ('DISPATCHED', 'RUNNING') AND to_state IN ('FAILED', 'RETRYING')
                 AND (LOWER(reason) LIKE '%timed out%' OR LOWER(reason) LIKE '%timeout%') THEN 1 ELSE 0 END) AS SIGNED) AS timeouts,
       CAST(SUM(CASE WHEN to_state = 'SUCCEEDED' THEN 1 ELSE 0 END) AS SIGNED) AS succeeded,
       CAST(SUM(CASE WHEN to_state = 'FAILED' THEN 1 ELSE 0 END) AS SIGNED) AS failed
FROM instance_transitions
WHERE created_at >= ?
GROUP BY task_name
