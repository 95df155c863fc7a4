//! The HTTP API through `router(state).oneshot(request)`, on real MySQL and NATS.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ax_api::AppState;
use ax_tests::TestEnv;
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(env: &TestEnv, method: &str, uri: &str, body: Option<Value>, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let state = AppState {
        store: env.store.clone(),
        bus: env.bus.clone(),
        metrics: ax_runtime::telemetry::prometheus(),
        workers: ax_api::workers::Directory::default(),
        lease: std::time::Duration::from_secs(30),
    };
    let mut request = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = match body {
        Some(body) => request.header("content-type", "application/json").body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = ax_api::router(state).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

fn definition(name: &str) -> Value {
    json!({"task_name": name, "owner": "api_tests", "execution": {"handler": "noop"}, "schema_version": 2})
}

#[tokio::test]
async fn registration_validates_and_versions() {
    let env = TestEnv::new().await;
    let (status, body) = call(&env, "PUT", "/api/v1/tasks/report", Some(definition("report")), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["version"], 1);
    let (status, body) = call(&env, "PUT", "/api/v1/tasks/report", Some(definition("report")), &[]).await;
    assert_eq!((status, body["version"].clone(), body["changed"].clone()), (StatusCode::OK, json!(1), json!(false)));
    let mut changed = definition("report");
    changed["owner"] = json!("someone_else");
    let (_, body) = call(&env, "PUT", "/api/v1/tasks/report", Some(changed), &[]).await;
    assert_eq!(body["version"], 2);

    let mut bad = definition("report");
    bad["execution"]["retry"] = json!({"backoff": "cubic"});
    let (status, body) = call(&env, "PUT", "/api/v1/tasks/report", Some(bad), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "bad_request");
    assert_eq!(body["error"]["field"], "execution.retry.backoff");

    let mut bad_cron = definition("report");
    bad_cron["triggers"] = json!([{"type": "cron", "cron": "0 2 * * *", "timezone": "Europe/Atlantis"}]);
    let (status, body) = call(&env, "PUT", "/api/v1/tasks/report", Some(bad_cron), &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("triggers[0].timezone")));
    let (status, preview) = call(&env, "GET", "/api/v1/cron/preview?expr=30%202%20*%20*%20*&tz=America/New_York&n=2&after=2026-03-07T12:00:00Z", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(preview["fires"][0]["utc"], "2026-03-08T07:00:00Z", "the preview applies the DST rule the scheduler fires by");
    let (status, body) = call(&env, "GET", "/api/v1/cron/preview?expr=61%20*%20*%20*%20*", None, &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("expr")));

    let (status, body) = call(&env, "PUT", "/api/v1/tasks/other", Some(definition("report")), &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("task_name")));
    let (_, body) = call(&env, "GET", "/api/v1/tasks/report", None, &[]).await;
    assert_eq!(body["version"], 2, "the refused updates changed nothing");

    let (status, body) = call(&env, "GET", "/api/v1/tasks/missing", None, &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::NOT_FOUND, json!("not_found")));
    let (_, body) = call(&env, "GET", "/api/v1/tasks", None, &[]).await;
    assert_eq!(body["tasks"].as_array().unwrap().len(), 1);

    // Lifecycle: disable refuses triggers, enable restores, delete keeps history.
    let (status, body) = call(&env, "POST", "/api/v1/tasks/report/disable", None, &[]).await;
    assert_eq!((status, body["enabled"].clone()), (StatusCode::OK, json!(false)));
    let (status, _) = call(&env, "POST", "/api/v1/tasks/report/trigger", Some(json!({})), &[]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    call(&env, "POST", "/api/v1/tasks/report/enable", None, &[]).await;
    let (status, fired) = call(&env, "POST", "/api/v1/tasks/report/trigger", Some(json!({})), &[]).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = call(&env, "DELETE", "/api/v1/tasks/report", None, &[]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&env, "GET", "/api/v1/tasks/report", None, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&env, "GET", &format!("/api/v1/instances/{}", fired["instance_id"].as_str().unwrap()), None, &[]).await;
    assert_eq!(status, StatusCode::OK, "a deleted task's instances are kept");
    let actions: Vec<String> = env.store.outbox_events().await.unwrap().into_iter().filter(|e| e.instance_id.is_none()).map(|e| e.subject).collect();
    let actions: Vec<&str> = actions.iter().map(|s| s.rsplit('.').next().unwrap()).collect();
    assert_eq!(actions, ["registered", "updated", "disabled", "enabled", "deleted"]);
    env.cleanup().await;
}

#[tokio::test]
async fn triggers_are_idempotent_and_checked() {
    let env = TestEnv::new().await;
    call(&env, "PUT", "/api/v1/tasks/job", Some(definition("job")), &[]).await;

    let key = [("idempotency-key", "order-7")];
    let (status, first) = call(&env, "POST", "/api/v1/tasks/job/trigger", Some(json!({"params": {"a": 1}})), &key).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, second) = call(&env, "POST", "/api/v1/tasks/job/trigger", Some(json!({"params": {"a": 1}})), &key).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["instance_id"], second["instance_id"]);
    assert_eq!(second["created"], false);

    let (status, body) = call(&env, "POST", "/api/v1/tasks/job/trigger", Some(json!({"params": [1, 2]})), &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("params")));
    let (status, _) = call(&env, "POST", "/api/v1/tasks/nope/trigger", Some(json!({})), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A payload version the task does not speak: an instance born REJECTED, never run.
    let (status, body) = call(&env, "POST", "/api/v1/tasks/job/trigger", Some(json!({"payload_version": 1})), &[]).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = body["instance_id"].as_str().unwrap();
    let (_, instance) = call(&env, "GET", &format!("/api/v1/instances/{id}"), None, &[]).await;
    assert_eq!(instance["state"], "REJECTED");
    assert!(instance["reason"].as_str().unwrap().contains("schema_version 2"), "{instance}");

    let (status, body) = call(&env, "GET", "/api/v1/instances/not-an-id", None, &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("id")));
    let (status, _) = call(&env, "GET", "/api/v1/instances/ins_01M8VG1EZNP9GBB9QN8FGW02Q2", None, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(&env, "GET", "/api/v1/instances?state=sleeping", None, &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("state")));
    let (_, body) = call(&env, "GET", "/api/v1/instances?task=job&state=created", None, &[]).await;
    assert_eq!(body["instances"].as_array().unwrap().len(), 1);
    env.cleanup().await;
}

#[tokio::test]
async fn the_schema_and_health_are_served() {
    let env = TestEnv::new().await;
    let (status, schema) = call(&env, "GET", "/api/v1/schema/task", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(schema["properties"]["execution"]["properties"]["retry"]["properties"]["backoff"]["enum"], json!(["fixed", "linear", "exp"]));
    let (status, health) = call(&env, "GET", "/healthz", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health, json!({"mysql": "ok", "nats": "ok"}));
    env.cleanup().await;
}

#[tokio::test]
async fn backfill_creates_each_missing_fire_once() {
    let env = TestEnv::new().await;
    let mut def = definition("hourly");
    def["triggers"] = json!([{"type": "cron", "cron": "0 * * * *", "timezone": "Asia/Shanghai"}]);
    call(&env, "PUT", "/api/v1/tasks/hourly", Some(def), &[]).await;
    let range = json!({"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T02:30:00Z"});
    let (status, body) = call(&env, "POST", "/api/v1/tasks/hourly/backfill", Some(range.clone()), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["fires"].clone(), body["created"].clone()), (json!(3), json!(3)));
    let (_, again) = call(&env, "POST", "/api/v1/tasks/hourly/backfill", Some(range), &[]).await;
    assert_eq!((again["created"].clone(), again["already_existed"].clone()), (json!(0), json!(3)));
    let (status, body) = call(&env, "POST", "/api/v1/tasks/hourly/backfill", Some(json!({"from": "2026-11-02T00:00:00Z", "to": "2026-11-01T00:00:00Z"})), &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("to")));
    env.cleanup().await;
}
