//! Operators' tools and the SDK's extras: cancel, rerun, progress, the worker
//! list, and the built-in http handler, in-process on real services.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ax_domain::state::StateKind;
use ax_tests::{eventually, TestEnv};
use serde_json::{json, Value};
use tower::ServiceExt;

async fn api(env: &TestEnv, directory: &ax_api::workers::Directory, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let state = ax_api::AppState {
        store: env.store.clone(),
        bus: env.bus.clone(),
        metrics: ax_runtime::telemetry::prometheus(),
        workers: directory.clone(),
        lease: Duration::from_secs(30),
    };
    let request = Request::builder().method(method).uri(uri).header("content-type", "application/json");
    let request = request.body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty)).unwrap();
    let response = ax_api::router(state).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn state_of(env: &TestEnv, id: &str) -> (StateKind, ax_store::InstanceRecord) {
    let record = env.store.instance(&id.parse().unwrap()).await.unwrap().unwrap();
    (record.state.kind(), record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_stops_a_running_attempt_progress_shows_and_rerun_links() {
    let env = TestEnv::new().await;
    let directory = ax_api::workers::Directory::start(&env.bus, tokio_util::sync::CancellationToken::new()).await.unwrap();
    let scheduler = env.start_scheduler(env.config(&[]));
    let stopped = Arc::new(AtomicU32::new(0));
    let slow = {
        let stopped = stopped.clone();
        ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
            let stopped = stopped.clone();
            async move {
                ctx.progress(40, "halfway there").await;
                tokio::select! {
                    _ = ctx.cancellation.cancelled() => {
                        stopped.fetch_add(1, Ordering::SeqCst);
                        Err(ax_worker::TaskError::retry("stopped"))
                    }
                    _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(None),
                }
            }
        })
    };
    let worker = env.start_worker(env.config(&["--worker-id", "ops1", "--tags", "blue"]), vec![("slow", slow)]);
    api(&env, &directory, "PUT", "/api/v1/tasks/slow_job", Some(json!({"task_name": "slow_job", "owner": "ops", "execution": {"handler": "slow"}}))).await;
    let (_, fired) = api(&env, &directory, "POST", "/api/v1/tasks/slow_job/trigger", Some(json!({"params": {"n": 1}}))).await;
    let id = fired["instance_id"].as_str().unwrap().to_owned();

    let progress = eventually(Duration::from_secs(20), "progress to show", || async {
        let (_, body) = api(&env, &directory, "GET", &format!("/api/v1/instances/{id}"), None).await;
        (body["progress"]["percent"] == 40).then_some(body)
    })
    .await;
    assert_eq!(progress["progress"]["message"], "halfway there");
    assert_eq!(progress["state"], "RUNNING");

    let (_, workers) = api(&env, &directory, "GET", "/api/v1/workers", None).await;
    let ops1 = workers["workers"].as_array().unwrap().iter().find(|w| w["id"] == "ops1").cloned().expect("the worker is listed");
    assert_eq!((ops1["tags"].clone(), ops1["alive"].clone(), ops1["max_running"].clone()), (json!(["blue"]), json!(true), json!(8)));

    let (status, cancelled) = api(&env, &directory, "POST", &format!("/api/v1/instances/{id}/cancel"), None).await;
    assert_eq!((status, cancelled["state"].clone()), (StatusCode::OK, json!("CANCELLED")));
    eventually(Duration::from_secs(10), "the handler to see the cancellation", || async { (stopped.load(Ordering::SeqCst) == 1).then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(state_of(&env, &id).await.0, StateKind::Cancelled, "the stopped attempt's report did not move it");
    let (status, _) = api(&env, &directory, "POST", &format!("/api/v1/instances/{id}/cancel"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "a final instance cannot be cancelled again");

    let (status, rerun) = api(&env, &directory, "POST", &format!("/api/v1/instances/{id}/rerun"), None).await;
    assert_eq!(status, StatusCode::CREATED);
    let new_id = rerun["instance_id"].as_str().unwrap().to_owned();
    let (_, new) = state_of(&env, &new_id).await;
    assert_eq!(new.rerun_of.as_ref().map(|r| r.as_str()), Some(id.as_str()));
    assert_eq!(new.params, json!({"n": 1}));
    assert_eq!(new.trigger_type, ax_domain::task::TriggerKind::Manual);
    let (status, body) = api(&env, &directory, "POST", &format!("/api/v1/instances/{new_id}/rerun"), None).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("id")), "only finished instances rerun");
    api(&env, &directory, "POST", &format!("/api/v1/instances/{new_id}/cancel"), None).await;
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_handler_calls_out_and_judges_the_status() {
    let env = TestEnv::new().await;
    let received = Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
    let app = {
        let received = received.clone();
        axum::Router::new().route(
            "/hook/{code}",
            axum::routing::post(move |axum::extract::Path(code): axum::extract::Path<u16>, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let received = received.clone();
                async move {
                    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                    received.lock().unwrap().push((key, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                    (StatusCode::from_u16(code).unwrap(), "{\"ok\": true}")
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let scheduler = env.start_scheduler(env.config(&[]));
    let worker = env.start_worker(env.config(&[]), vec![("http", ax_worker::handlers::http())]);
    for (name, code) in [("hook_ok", 200), ("hook_bad", 422)] {
        env.register(json!({"task_name": name, "owner": "ops", "execution": {"handler": "http", "config": {"url": format!("http://{addr}/hook/{code}")},
            "retry": {"max_attempts": 3, "initial_interval_sec": 1}}}))
            .await;
    }
    let task = env.store.task("hook_ok").await.unwrap().unwrap();
    let request = ax_domain::trigger::TriggerRequest { params: json!({"order": 9}), ..Default::default() };
    let new = ax_store::NewInstance::from_trigger(&task, &request, "h1".into(), ax_domain::task::TriggerKind::Event, "test", ax_domain::now());
    let ok = env.store.create_instances(&[new]).await.unwrap().remove(0).instance_id().clone();
    let task = env.store.task("hook_bad").await.unwrap().unwrap();
    let new = ax_store::NewInstance::from_trigger(&task, &Default::default(), "h2".into(), ax_domain::task::TriggerKind::Event, "test", ax_domain::now());
    let bad = env.store.create_instances(&[new]).await.unwrap().remove(0).instance_id().clone();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();

    let done = eventually(Duration::from_secs(20), "the ok call to succeed", || async {
        let (state, record) = state_of(&env, ok.as_str()).await;
        (state == StateKind::Succeeded).then_some(record)
    })
    .await;
    assert_eq!(done.result.unwrap()["status"], 200);
    let failed = eventually(Duration::from_secs(20), "the 422 to fail without retry", || async {
        let (state, record) = state_of(&env, bad.as_str()).await;
        (state == StateKind::Failed).then_some(record)
    })
    .await;
    assert_eq!(failed.attempt, 1, "a 4xx is not retried");
    assert!(failed.reason.contains("HTTP 422"), "{}", failed.reason);
    let calls = received.lock().unwrap().clone();
    let to_ok = calls.iter().find(|(key, _)| key.starts_with(ok.as_str())).expect("the ok hook was called");
    assert_eq!(to_ok.1, json!({"order": 9}), "the params are the body");
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_side_effect_under_once_runs_a_single_time_across_retries() {
    let env = TestEnv::new().await;
    let _scheduler = env.start_scheduler(env.config(&["--lease", "6s", "--heartbeat-interval", "1s"]));
    let charges = Arc::new(AtomicU32::new(0));
    let handler = {
        let charges = charges.clone();
        ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
            let charges = charges.clone();
            async move {
                let receipt = ctx
                    .once("charge", || async {
                        let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                        Ok(json!({ "receipt": n }))
                    })
                    .await?;
                // The step after the side effect fails on the first attempt.
                if ctx.attempt == 1 {
                    return Err(ax_worker::TaskError::retry("mail server down after charging"));
                }
                Ok(Some(receipt))
            }
        })
    };
    let _worker = env.start_worker(env.config(&["--lease", "6s", "--heartbeat-interval", "1s"]), vec![("charge", handler)]);
    env.register(json!({
        "task_name": "charge_once", "owner": "tests",
        "execution": {"handler": "charge", "retry": {"max_attempts": 3, "backoff": "fixed", "initial_interval_sec": 1}}
    }))
    .await;
    let (status, body) = env.call("POST", "/api/v1/tasks/charge_once/trigger", Some(json!({}))).await;
    assert!(status.is_success(), "{body}");
    let id = body["instance_id"].as_str().unwrap().to_owned();
    let done = eventually(Duration::from_secs(20), "the second attempt to succeed", || async {
        let (state, record) = state_of(&env, &id).await;
        state.is_final().then_some(record)
    })
    .await;
    assert_eq!((done.state.kind(), done.attempt), (StateKind::Succeeded, 2), "{}", done.reason);
    assert_eq!(charges.load(Ordering::SeqCst), 1, "the charge ran once across two attempts");
    assert_eq!(done.result, Some(json!({ "receipt": 1 })), "attempt 2 got attempt 1's recorded result");
    env.cleanup().await;
}
