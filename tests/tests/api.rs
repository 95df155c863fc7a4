//! The HTTP API through `router(state).oneshot(request)`, on real MySQL and NATS.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ax_api::AppState;
use ax_tests::TestEnv;
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(env: &TestEnv, method: &str, uri: &str, body: Option<Value>, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let state = AppState { store: env.store.clone(), bus: env.bus.clone(), metrics: ax_runtime::telemetry::prometheus() };
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

    let (status, body) = call(&env, "PUT", "/api/v1/tasks/other", Some(definition("report")), &[]).await;
    assert_eq!((status, body["error"]["field"].clone()), (StatusCode::BAD_REQUEST, json!("task_name")));
    let (_, body) = call(&env, "GET", "/api/v1/tasks/report", None, &[]).await;
    assert_eq!(body["version"], 2, "the refused updates changed nothing");

    let (status, body) = call(&env, "GET", "/api/v1/tasks/missing", None, &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::NOT_FOUND, json!("not_found")));
    let (_, body) = call(&env, "GET", "/api/v1/tasks", None, &[]).await;
    assert_eq!(body["tasks"].as_array().unwrap().len(), 1);
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
