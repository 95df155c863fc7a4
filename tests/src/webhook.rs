//! A webhook receiver for tests: an axum server on a free loopback port that keeps
//! every request (path with query, and JSON body) and can fail the first few.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Router;
use tokio_util::sync::CancellationToken;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Path and query (DingTalk signs in the query).
    pub uri: String,
    pub body: serde_json::Value,
    /// The status it was answered with.
    pub status: u16,
}

#[derive(Clone)]
struct Inner {
    received: Arc<Mutex<Vec<Received>>>,
    fail_first: usize,
}

pub struct WebhookReceiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

impl WebhookReceiver {
    /// Answers 200 with `{"errcode":0,"code":0}` (what chat tools say on success),
    /// except for the first `fail_first` requests, which get a 500.
    pub async fn start(fail_first: usize) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the webhook receiver");
        let url = format!("http://{}", listener.local_addr().expect("receiver address"));
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let inner = Inner { received: received.clone(), fail_first };
        let app = Router::new().fallback(receive).with_state(inner);
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await;
        });
        Self { url, received, stop }
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("receiver lock").clone()
    }

    /// The requests that were answered 200.
    pub fn accepted(&self) -> Vec<Received> {
        self.received().into_iter().filter(|r| r.status == 200).collect()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn receive(State(inner): State<Inner>, uri: Uri, body: Bytes) -> (StatusCode, String) {
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::String(String::from_utf8_lossy(&body).into_owned()));
    let mut received = inner.received.lock().expect("receiver lock");
    let status = if received.len() < inner.fail_first { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK };
    received.push(Received { uri: uri.to_string(), body, status: status.as_u16() });
    (status, r#"{"errcode":0,"code":0}"#.to_owned())
}
