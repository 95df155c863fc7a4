-- Each task's newest instance (index ix_instances_task_created).
SELECT task_name, MAX(created_at) FROM instances GROUP BY task_name
