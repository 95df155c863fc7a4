//! `/metrics` after a known scenario: 5 successes, 2 failures, 1 retry that then
//! succeeds. The counts must be exactly what happened. (One test in this binary:
//! the Prometheus recorder is per process.)

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use ax_tests::{eventually, TestEnv};
use ax_worker::{handler_fn, TaskContext, TaskError};
use serde_json::json;

/// The value of the sample `name{labels}` in a Prometheus text page, labels in any order.
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<&str, &str> = labels.iter().copied().collect();
    page.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.strip_suffix('}')?),
            None => (series, ""),
        };
        if metric != name {
            return None;
        }
        let have: BTreeMap<&str, &str> = rest
            .split(',')
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        (have == wanted).then(|| value.parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_five_successes_two_failures_and_one_retry() {
    let env = TestEnv::new().await;
    let _ = ax_runtime::telemetry::prometheus();
    env.register(json!({"task_name": "m_ok", "owner": "t", "execution": {"handler": "ok"}})).await;
    env.register(json!({"task_name": "m_bad", "owner": "t", "execution": {"handler": "bad"}})).await;
    env.register(json!({
        "task_name": "m_flaky", "owner": "t",
        "execution": {"handler": "flaky", "retry": {"max_attempts": 2, "backoff": "fixed", "initial_interval_sec": 1}}
    }))
    .await;
    let config = env.config(&["--monitor-interval", "200ms", "--health-report-cron", "off"]);
    let scheduler = env.start_scheduler(config.clone());
    let worker = env.start_worker(
        config.clone(),
        vec![
            ("ok", handler_fn(|_ctx: TaskContext| async { Ok(None) })),
            ("bad", handler_fn(|_ctx: TaskContext| async { Err(TaskError::abort("no")) })),
            (
                "flaky",
                handler_fn(|ctx: TaskContext| async move { if ctx.attempt == 1 { Err(TaskError::retry("not yet")) } else { Ok(None) } }),
            ),
        ],
    );
    let monitor = env.start_monitor(config);

    let mut ids = Vec::new();
    for (task, n) in [("m_ok", 5), ("m_bad", 2), ("m_flaky", 1)] {
        for _ in 0..n {
            let (status, body) = env.call("POST", &format!("/api/v1/tasks/{task}/trigger"), Some(json!({}))).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            ids.push(body["instance_id"].as_str().unwrap().parse::<ax_domain::ids::InstanceId>().unwrap());
        }
    }
    for id in &ids {
        eventually(Duration::from_secs(30), &format!("{id} to finish"), || async {
            env.store.instance(id).await.ok()??.state.kind().is_final().then_some(())
        })
        .await;
    }
    env.outbox_drained().await;
    env.consumer_idle("AX_EVENTS", "ax-monitor").await;

    let (status, page) = env.call("GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let page = page.as_str().expect("a text page").to_owned();
    let value = |name: &str, labels: &[(&str, &str)]| sample(&page, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{page}"));

    assert_eq!(value("ax_instance_outcomes_total", &[("task", "m_ok"), ("outcome", "succeeded")]), 5.0);
    assert_eq!(value("ax_instance_outcomes_total", &[("task", "m_bad"), ("outcome", "failed")]), 2.0);
    assert_eq!(value("ax_instance_outcomes_total", &[("task", "m_flaky"), ("outcome", "succeeded")]), 1.0);
    assert_eq!(value("ax_instance_retries_total", &[("task", "m_flaky")]), 1.0);
    assert_eq!(sample(&page, "ax_instance_retries_total", &[("task", "m_ok")]), None, "no retry of m_ok");
    assert_eq!(value("ax_instances_total", &[("task", "m_ok")]), 5.0);
    assert_eq!(value("ax_instances_total", &[("task", "m_flaky")]), 1.0);
    assert_eq!(value("ax_attempt_outcomes_total", &[("task", "m_flaky"), ("outcome", "failed")]), 1.0);
    assert_eq!(value("ax_attempt_outcomes_total", &[("task", "m_flaky"), ("outcome", "succeeded")]), 1.0);
    assert_eq!(value("ax_attempt_outcomes_total", &[("task", "m_bad"), ("outcome", "failed")]), 2.0);
    assert_eq!(value("ax_dispatch_outcomes_total", &[("task", "m_ok"), ("outcome", "started")]), 5.0);
    assert_eq!(value("ax_dispatch_outcomes_total", &[("task", "m_flaky"), ("outcome", "started")]), 2.0);
    assert_eq!(value("ax_instance_run_duration_seconds_count", &[("task", "m_ok")]), 5.0);
    assert_eq!(value("ax_instance_pickup_delay_seconds_count", &[("task", "m_bad")]), 2.0);
    assert_eq!(value("ax_instance_transitions_total", &[("task", "m_flaky"), ("from", "running"), ("to", "retrying")]), 1.0);
    // 4 transitions per plain run, 8 for the run that retried.
    assert_eq!(value("ax_monitor_events_total", &[("kind", "instance_transitioned")]), (5.0 + 2.0) * 4.0 + 8.0);
    assert_eq!(value("ax_monitor_events_total", &[("kind", "task_changed")]), 3.0);
    assert!(page.contains("ax_instance_run_duration_seconds_bucket{"), "durations are histograms");
    assert!(value("ax_dispatch_pass_seconds_count", &[]) >= 1.0, "dispatch passes are timed");

    // The periodic pass sets the gauges: nothing is left unfinished, one worker is alive.
    eventually(Duration::from_secs(10), "the worker pool gauge", || async {
        let (_, page) = env.call("GET", "/metrics", None).await;
        let page = page.as_str()?.to_owned();
        (sample(&page, "ax_worker_pool_workers", &[]) == Some(1.0) && sample(&page, "ax_outbox_pending_events", &[]) == Some(0.0)).then_some(())
    })
    .await;
    assert!(page.contains("process_resident_memory_bytes"), "process metrics are exported");

    monitor.stop().await;
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}
