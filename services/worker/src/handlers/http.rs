//! `http`: calls a URL. `execution.config`:
//! `{"url": "http://…", "method": "POST", "headers": {"k": "v"}, "body": <string or JSON>,
//!   "expected_status": [200, 204], "timeout_sec": 30}`.
//! The trigger's params are sent as the body when none is configured (for methods
//! that take one). A status outside `expected_status` (default: any 2xx) fails the
//! attempt with the status and the start of the response; 4xx fails without retry,
//! 5xx and transport errors retry.

use std::sync::Arc;
use std::time::Duration;

use crate::context::{handler_fn, Handler, TaskContext, TaskError};

const BODY_TAIL: usize = 512;

pub fn http() -> Arc<dyn Handler> {
    let client = reqwest::Client::builder().build().expect("an http client without TLS always builds");
    handler_fn(move |ctx: TaskContext| {
        let client = client.clone();
        async move { call(&client, ctx).await }
    })
}

async fn call(client: &reqwest::Client, ctx: TaskContext) -> Result<Option<serde_json::Value>, TaskError> {
    let config = &ctx.config;
    let url = config.get("url").and_then(|u| u.as_str()).ok_or_else(|| TaskError::abort("execution.config.url is missing"))?;
    let method = config.get("method").and_then(|m| m.as_str()).unwrap_or("POST").to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| TaskError::abort(format!("execution.config.method {method:?} is not an HTTP method")))?;
    let timeout = Duration::from_secs(config.get("timeout_sec").and_then(|t| t.as_u64()).unwrap_or(30));
    let mut request = client
        .request(method.clone(), url)
        .timeout(timeout)
        .header("Ax-Instance", ctx.instance_id.as_str())
        .header("Ax-Attempt", ctx.attempt.to_string())
        .header("Ax-Trace-Id", ctx.trace_id.as_str())
        .header("Idempotency-Key", ctx.idempotency_key("http"));
    if let Some(headers) = config.get("headers").and_then(|h| h.as_object()) {
        for (name, value) in headers {
            if let Some(value) = value.as_str() {
                request = request.header(name.as_str(), value);
            }
        }
    }
    request = match config.get("body") {
        Some(serde_json::Value::String(text)) => request.body(text.clone()),
        Some(json) => request.json(json),
        None if method != reqwest::Method::GET && method != reqwest::Method::HEAD => request.json(&ctx.params),
        None => request,
    };
    let response = tokio::select! {
        response = request.send() => response.map_err(|err| TaskError::retry(format!("request to {url} failed: {err}")))?,
        _ = ctx.cancellation.cancelled() => return Err(TaskError::retry("cancelled")),
    };
    let status = response.status().as_u16();
    let expected: Vec<u16> = match config.get("expected_status") {
        Some(serde_json::Value::Array(codes)) => codes.iter().filter_map(|c| c.as_u64()).map(|c| c as u16).collect(),
        Some(serde_json::Value::Number(code)) => code.as_u64().map(|c| vec![c as u16]).unwrap_or_default(),
        _ => Vec::new(),
    };
    let ok = if expected.is_empty() { (200..300).contains(&status) } else { expected.contains(&status) };
    let text = response.text().await.unwrap_or_default();
    if ok {
        let result = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text.chars().take(4096).collect()));
        return Ok(Some(serde_json::json!({ "status": status, "body": result })));
    }
    let reason = format!("HTTP {status} from {url}: {}", text.chars().take(BODY_TAIL).collect::<String>());
    if (400..500).contains(&status) && status != 408 && status != 429 {
        Err(TaskError::Abort { reason })
    } else {
        Err(TaskError::Retry { reason })
    }
}
