//! Alerts end to end: scheduler, worker and monitor in-process, a real webhook
//! receiver on a free port, rules and channels through the api.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use ax_tests::webhook::WebhookReceiver;
use ax_tests::{eventually, TestEnv};
use ax_worker::{handler_fn, Handler, TaskContext, TaskError};
use serde_json::{json, Value};

fn monitor_flags() -> Vec<&'static str> {
    vec![
        "--monitor-interval",
        "300ms",
        "--alert-retry-initial",
        "100ms",
        "--alert-retry-max",
        "400ms",
        "--health-report-cron",
        "off",
        "--log-link",
        "http://console.test/instances/{instance_id}/logs",
    ]
}

/// Fails when the params say so, without retry.
fn flaky() -> Arc<dyn Handler> {
    handler_fn(|ctx: TaskContext| async move {
        if ctx.params["fail"].as_bool() == Some(true) {
            ctx.log.error("the disk is full");
            Err(TaskError::abort("disk full"))
        } else {
            Ok(None)
        }
    })
}

async fn trigger(env: &TestEnv, task: &str, params: Value) -> String {
    let (status, body) = env.call("POST", &format!("/api/v1/tasks/{task}/trigger"), Some(json!({ "params": params }))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["instance_id"].as_str().unwrap().to_owned()
}

async fn wait_finished(env: &TestEnv, ids: &[String]) {
    for id in ids {
        let id: ax_domain::ids::InstanceId = id.parse().unwrap();
        eventually(Duration::from_secs(30), &format!("{id} to finish"), || async {
            let instance = env.store.instance(&id).await.ok()??;
            instance.state.kind().is_final().then_some(())
        })
        .await;
    }
}

/// Every event so far has been judged by the monitor.
async fn monitor_caught_up(env: &TestEnv) {
    env.outbox_drained().await;
    env.consumer_idle("AX_EVENTS", "ax-monitor").await;
}

async fn alerts_of(env: &TestEnv, rule: &str) -> Vec<Value> {
    let (status, body) = env.call("GET", &format!("/api/v1/alerts?rule={rule}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["alerts"].as_array().unwrap().clone()
}

async fn alert(env: &TestEnv, id: &str) -> Value {
    let (status, body) = env.call("GET", &format!("/api/v1/alerts/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failures_in_a_row_send_one_p1_and_a_storm_in_the_silence_window_sends_nothing_more() {
    let env = TestEnv::new().await;
    let receiver = WebhookReceiver::start(0).await;
    let (status, body) = env
        .call("PUT", "/api/v1/alert-channels/oncall", Some(json!({"name": "oncall", "format": "generic", "url": receiver.url, "levels": ["P1"]})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    env.register(json!({"task_name": "nightly_sync", "owner": "data_team", "execution": {"handler": "flaky"}})).await;

    let config = env.config(&monitor_flags());
    let scheduler = env.start_scheduler(config.clone());
    let worker = env.start_worker(config.clone(), vec![("flaky", flaky())]);
    let monitor = env.start_monitor(config);

    // Storm 1: three failures in a row.
    let mut first_storm = Vec::new();
    for _ in 0..3 {
        first_storm.push(trigger(&env, "nightly_sync", json!({"fail": true})).await);
    }
    wait_finished(&env, &first_storm).await;
    let notification = eventually(Duration::from_secs(30), "the P1 notification", || async {
        receiver.accepted().first().map(|r| r.body.clone())
    })
    .await;
    assert_eq!(notification["type"], "alert");
    assert_eq!(notification["status"], "firing");
    assert_eq!(notification["level"], "P1");
    assert_eq!(notification["rule"], "task-failing");
    assert_eq!(notification["task"], "nightly_sync");
    assert_eq!(notification["owner"], "data_team");
    let instance = notification["instance_id"].as_str().unwrap().to_owned();
    assert!(first_storm.contains(&instance), "{notification}");
    let named: HashSet<&str> = notification["details"]["instances"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
    assert_eq!(named, first_storm.iter().map(String::as_str).collect(), "the three failed instances are named");
    assert_eq!(notification["log_url"], format!("http://console.test/instances/{instance}/logs"));
    assert!(notification["text"].as_str().unwrap().contains(&instance));
    assert!(notification["trace_id"].as_str().unwrap().starts_with("trc_"));
    let alert_id = notification["alert_id"].as_str().unwrap().to_owned();

    // Storm 2, inside the silence window and while the alert is open: nothing more.
    let mut second_storm = Vec::new();
    for _ in 0..3 {
        second_storm.push(trigger(&env, "nightly_sync", json!({"fail": true})).await);
    }
    wait_finished(&env, &second_storm).await;
    monitor_caught_up(&env).await;
    let open = eventually(Duration::from_secs(30), "the delivery to be recorded", || async {
        let open = alert(&env, &alert_id).await;
        (open["notifications"][0]["status"] == "sent").then_some(open)
    })
    .await;
    assert_eq!(open["status"], "firing");
    assert!(open["occurrences"].as_u64().unwrap() >= 2, "the storm was counted: {open}");
    assert_eq!(open["notifications"].as_array().unwrap().len(), 1, "one delivery decided: {open}");
    assert_eq!(receiver.received().len(), 1, "exactly one notification");

    // A success clears it, and the recovery is sent.
    let fine = trigger(&env, "nightly_sync", json!({})).await;
    wait_finished(&env, &[fine]).await;
    let recovered = eventually(Duration::from_secs(30), "the recovery notification", || async {
        receiver.accepted().get(1).map(|r| r.body.clone())
    })
    .await;
    assert_eq!(recovered["status"], "resolved");
    assert_eq!(recovered["alert_id"], alert_id.as_str());
    assert_eq!(alert(&env, &alert_id).await["status"], "resolved");

    // Storm 3, still inside the silence window of the first notification: the new
    // alert is recorded but silenced.
    let mut third_storm = Vec::new();
    for _ in 0..3 {
        third_storm.push(trigger(&env, "nightly_sync", json!({"fail": true})).await);
    }
    wait_finished(&env, &third_storm).await;
    monitor_caught_up(&env).await;
    let alerts = alerts_of(&env, "task-failing").await;
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    let newest = &alerts[0];
    assert_eq!(newest["status"], "firing");
    assert_eq!(newest["silenced"], true, "{newest}");
    assert!(newest["notified_at"].is_null());
    assert_eq!(receiver.received().len(), 2, "nothing sent for the silenced storm");

    // Someone takes it.
    let newest_id = newest["id"].as_str().unwrap();
    let (status, body) = env.call("POST", &format!("/api/v1/alerts/{newest_id}/ack"), Some(json!({"by": " ", "comment": "x"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["field"], "by");
    let (status, body) = env.call("POST", &format!("/api/v1/alerts/{newest_id}/ack"), Some(json!({"by": "alice", "comment": "looking"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["acknowledged_by"], "alice");
    assert!(body["acknowledged_at"].is_string());

    monitor.stop().await;
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_is_retried_with_back_off_and_its_failures_are_visible() {
    let env = TestEnv::new().await;
    // The first two calls fail with a 500.
    let receiver = WebhookReceiver::start(2).await;
    let (status, _) = env.call("PUT", "/api/v1/alert-channels/ops", Some(json!({"name": "ops", "format": "generic", "url": receiver.url}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let monitor = env.start_monitor(env.config(&monitor_flags()));
    let (status, _) = env.call("POST", "/api/v1/alert-channels/ops/test", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let delivered = eventually(Duration::from_secs(30), "the third try to get through", || async { receiver.accepted().first().cloned() }).await;
    assert_eq!(delivered.body["type"], "test");
    assert_eq!(receiver.received().iter().map(|r| r.status).collect::<Vec<_>>(), [500, 500, 200]);
    // The monitor records the answer after the receiver saw the request.
    let row: (String, u32, Option<String>) = eventually(Duration::from_secs(30), "the delivery to be recorded", || async {
        let row: (String, u32, Option<String>) =
            sqlx::query_as("SELECT status, attempts, last_error FROM alert_notifications").fetch_one(env.store.pool()).await.ok()?;
        (row.0 == "sent").then_some(row)
    })
    .await;
    assert_eq!((row.1, row.2), (3, None));
    let metrics = ax_runtime::telemetry::prometheus().render();
    assert!(metrics.contains(r#"ax_alert_notifications_total{channel="ops",result="failed"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"ax_alert_notifications_total{channel="ops",result="sent"} 1"#), "{metrics}");
    monitor.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_format_reaches_its_webhook_signed_where_the_tool_wants_it() {
    let env = TestEnv::new().await;
    let receiver = WebhookReceiver::start(0).await;
    for (name, format, secret) in [
        ("generic", "generic", None),
        ("wecom", "wecom", None),
        ("dingtalk", "dingtalk", Some("ding-secret")),
        ("feishu", "feishu", Some("feishu-secret")),
        ("slack", "slack", None),
    ] {
        let mut channel = json!({"name": name, "format": format, "url": format!("{}/{name}?access_token=t0ken", receiver.url)});
        if let Some(secret) = secret {
            channel["secret"] = json!(secret);
        }
        let (status, body) = env.call("PUT", &format!("/api/v1/alert-channels/{name}"), Some(channel)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(!body.to_string().contains("t0ken") && !body.to_string().contains("secret\":\""), "{body}");
    }
    let (status, body) = env.call("PUT", "/api/v1/alert-channels/bad", Some(json!({"name": "bad", "format": "teams", "url": "https://x"}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("format")));

    let monitor = env.start_monitor(env.config(&monitor_flags()));
    for name in ["generic", "wecom", "dingtalk", "feishu", "slack"] {
        let (status, _) = env.call("POST", &format!("/api/v1/alert-channels/{name}/test"), None).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    eventually(Duration::from_secs(30), "five deliveries", || async { (receiver.accepted().len() == 5).then_some(()) }).await;
    let by_path = |name: &str| receiver.received().into_iter().find(|r| r.uri.starts_with(&format!("/{name}?"))).unwrap();
    assert_eq!(by_path("generic").body["type"], "test");
    assert_eq!(by_path("wecom").body["msgtype"], "markdown");
    assert_eq!(by_path("slack").body["text"].as_str().map(|t| t.starts_with('*')), Some(true));
    let ding = by_path("dingtalk");
    assert_eq!(ding.body["msgtype"], "markdown");
    let query: std::collections::HashMap<String, String> =
        ding.uri.split_once('?').unwrap().1.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    let timestamp: i64 = query["timestamp"].parse().unwrap();
    let expected = ax_monitor::notify::send::dingtalk_sign("ding-secret", timestamp).replace('+', "%2B").replace('/', "%2F").replace('=', "%3D");
    assert_eq!(query["sign"], expected);
    let feishu = by_path("feishu");
    assert_eq!(feishu.body["msg_type"], "text");
    let timestamp: i64 = feishu.body["timestamp"].as_str().unwrap().parse().unwrap();
    assert_eq!(feishu.body["sign"], ax_monitor::notify::send::feishu_sign("feishu-secret", timestamp));
    monitor.stop().await;
    env.cleanup().await;
}
