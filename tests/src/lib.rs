//! The sandbox every end-to-end test runs in: its own MySQL database, its own
//! namespace (NATS subjects, stream names and Redis keys), so tests run in parallel
//! against the same servers without seeing each other.
//!
//! A service that does not answer fails the test with its name and how to start it;
//! nothing here skips.

pub mod proxy;
pub mod webhook;

use std::time::Duration;

use ax_bus::Bus;
use ax_domain::subjects::Names;
use ax_queue::WorkerQueues;
use ax_runtime::Config;
use ax_store::Store;
use clap::Parser;
use tokio_util::sync::CancellationToken;

pub fn mysql_server_url() -> String {
    std::env::var("AX_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}
pub fn redis_url() -> String {
    std::env::var("AX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}
pub fn nats_url() -> String {
    std::env::var("AX_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

fn unreachable(service: &str, url: &str, err: impl std::fmt::Display) -> ! {
    panic!("{service} at {url} is unreachable ({err}); start it with scripts/services (scripts/test does this first)")
}

#[derive(Parser)]
struct ConfigOnly {
    #[command(flatten)]
    config: Config,
}

/// One test's private corner of the shared servers.
pub struct TestEnv {
    pub namespace: String,
    pub names: Names,
    pub database: String,
    pub mysql_url: String,
    pub store: Store,
    pub bus: Bus,
    pub queues: WorkerQueues,
}

impl TestEnv {
    /// A fresh database (migrated), a fresh namespace with its streams applied.
    pub async fn new() -> Self {
        let log = ax_runtime::config::LogConfig {
            log: std::env::var("AX_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            log_format: "text".into(),
        };
        ax_runtime::telemetry::init_tracing(&log);
        let id = ulid::Ulid::new().to_string().to_ascii_lowercase();
        let namespace = format!("axt_{}", &id[id.len() - 12..]);
        let names = Names::new(&namespace);
        let database = namespace.clone();
        let mysql_url = format!("{}/{database}", mysql_server_url().trim_end_matches('/'));
        let store = match Store::connect(&mysql_url, 16, names.clone()).await {
            Ok(store) => store,
            Err(err) => unreachable("MySQL/MariaDB", &mysql_server_url(), format!("{err}: {:?}", std::error::Error::source(&err))),
        };
        store.migrate().await.expect("migrations apply to a fresh database");
        let bus = match Bus::connect(&nats_url(), names.clone(), "ax-tests").await {
            Ok(bus) => bus,
            Err(err) => unreachable("NATS (with JetStream)", &nats_url(), err),
        };
        if let Err(err) = bus.apply_definitions().await {
            panic!("NATS at {} refused the stream definitions ({err}); is JetStream enabled? scripts/services starts it with -js", nats_url());
        }
        let queues = match WorkerQueues::connect(&redis_url(), names.clone()).await {
            Ok(q) => q,
            Err(err) => unreachable("Redis", &redis_url(), err),
        };
        // Make sure Redis really answers (the manager connects lazily on some paths).
        let mut conn = queues.connection();
        if let Err(err) = redis::cmd("PING").query_async::<String>(&mut conn).await {
            unreachable("Redis", &redis_url(), err);
        }
        Self { namespace, names, database, mysql_url, store, bus, queues }
    }

    /// Configuration pointing at this sandbox, with `extra` flags on top.
    pub fn config(&self, extra: &[&str]) -> Config {
        let mut args: Vec<String> = vec![
            "ax".into(),
            "--mysql-url".into(),
            self.mysql_url.clone(),
            "--mysql-max-connections".into(),
            "16".into(),
            "--redis-url".into(),
            redis_url(),
            "--nats-url".into(),
            nats_url(),
            "--namespace".into(),
            self.namespace.clone(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let parsed = ConfigOnly::try_parse_from(&args).expect("test configuration parses");
        parsed.config.validate().expect("test configuration is valid");
        parsed.config
    }

    /// The environment a spawned `ax` process needs to join this sandbox.
    pub fn env_vars(&self) -> Vec<(String, String)> {
        vec![
            ("AX_MYSQL_URL".into(), self.mysql_url.clone()),
            ("AX_REDIS_URL".into(), redis_url()),
            ("AX_NATS_URL".into(), nats_url()),
            ("AX_NAMESPACE".into(), self.namespace.clone()),
        ]
    }

    /// Starts a scheduler in-process; it stops when the returned token is cancelled.
    pub fn start_scheduler(&self, config: Config) -> Service {
        let deps = ax_scheduler::Deps { store: self.store.clone(), bus: self.bus.clone(), queues: self.queues.clone() };
        Service::spawn(|token| ax_scheduler::run(config, deps, token))
    }

    /// Starts a worker in-process with the given handlers.
    pub fn start_worker(&self, config: Config, handlers: Vec<(&str, std::sync::Arc<dyn ax_worker::Handler>)>) -> Service {
        let mut builder = ax_worker::Worker::builder(config);
        for (name, handler) in handlers {
            builder = builder.handler(name, handler);
        }
        let worker = builder.build();
        let bus = self.bus.clone();
        Service::spawn(move |token| worker.run_with(bus, token))
    }

    /// Starts a monitor in-process.
    pub fn start_monitor(&self, config: Config) -> Service {
        let deps = ax_monitor::Deps { store: self.store.clone(), bus: self.bus.clone(), queues: self.queues.clone() };
        Service::spawn(|token| ax_monitor::run(config, deps, token))
    }

    /// Starts a log sink in-process.
    pub fn start_log_sink(&self, config: Config) -> Service {
        let deps = ax_log_sink::Deps { store: self.store.clone(), bus: self.bus.clone() };
        Service::spawn(|token| ax_log_sink::run(config, deps, token))
    }

    /// The api's router on this sandbox, for `oneshot` calls.
    pub fn api(&self) -> axum::Router {
        ax_api::router(ax_api::AppState {
            store: self.store.clone(),
            bus: self.bus.clone(),
            metrics: ax_runtime::telemetry::prometheus(),
            workers: ax_api::workers::Directory::default(),
            lease: Duration::from_secs(30),
        })
    }

    /// Calls the api in-process; the body is JSON when it parses, else a string.
    pub async fn call(&self, method: &str, uri: &str, body: Option<serde_json::Value>) -> (axum::http::StatusCode, serde_json::Value) {
        use tower::ServiceExt;
        let request = axum::http::Request::builder().method(method).uri(uri);
        let request = match body {
            Some(body) => request.header("content-type", "application/json").body(axum::body::Body::from(body.to_string())),
            None => request.body(axum::body::Body::empty()),
        }
        .expect("a valid request");
        let response = self.api().oneshot(request).await.expect("the router answers");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 64 << 20).await.expect("a body");
        let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    /// Waits until a durable consumer has handed out everything and had it acknowledged.
    pub async fn consumer_idle(&self, stream_base: &str, durable: &str) {
        let stream = self.bus.jetstream.get_stream(self.names.stream(stream_base)).await.expect("stream exists");
        let consumer: async_nats::jetstream::consumer::PullConsumer = stream.get_consumer(durable).await.expect("consumer exists");
        eventually(Duration::from_secs(30), &format!("consumer {durable} to be idle"), || {
            let mut consumer = consumer.clone();
            async move {
                let info = consumer.info().await.ok()?;
                (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
            }
        })
        .await;
    }

    /// Waits until every committed event has left the outbox.
    pub async fn outbox_drained(&self) {
        eventually(Duration::from_secs(30), "the outbox to drain", || async {
            self.store.outbox_pending(1).await.ok()?.0.is_empty().then_some(())
        })
        .await;
    }

    /// Runs `ax <args>` in this sandbox to completion: (exit code, stdout, stderr).
    pub async fn run_ax(&self, args: &[&str], extra_env: &[(&str, String)]) -> (i32, String, String) {
        let mut command = tokio::process::Command::new(ax_binary());
        command.args(args).stdin(std::process::Stdio::null()).kill_on_drop(true);
        for (k, v) in self.env_vars() {
            command.env(k, v);
        }
        for (k, v) in extra_env {
            command.env(k, v);
        }
        command.env("AX_LOG", "warn");
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .unwrap_or_else(|_| panic!("ax {} did not finish within 60 s", args.join(" ")))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", ax_binary().display()));
        (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    }

    /// Registers a task from JSON.
    pub async fn register(&self, json: serde_json::Value) -> ax_store::TaskRecord {
        let definition = ax_domain::task::TaskDefinition::from_json(json.to_string().as_bytes()).expect("test definition is valid");
        self.store.register_task(&definition, "test").await.expect("registration commits").task
    }

    /// Drops what this test made on the shared servers.
    pub async fn cleanup(self) {
        for stream in self.bus.stream_configs().unwrap_or_default() {
            let _ = self.bus.jetstream.delete_stream(&stream.name).await;
        }
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.database);
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(self.store.pool()).await;
    }
}

/// An in-process service; cancelled and awaited by [`Service::stop`], cancelled on drop.
pub struct Service {
    token: CancellationToken,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Service {
    pub fn spawn<F, Fut>(start: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let token = CancellationToken::new();
        let handle = tokio::spawn(start(token.clone()));
        Self { token, handle: Some(handle) }
    }

    pub async fn stop(mut self) {
        self.token.cancel();
        if let Some(handle) = self.handle.take() {
            match tokio::time::timeout(Duration::from_secs(40), handle).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(err))) => panic!("service failed: {err:#}"),
                Ok(Err(err)) => panic!("service panicked: {err}"),
                Err(_) => panic!("service did not stop within 40 s"),
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every event in this sandbox's `AX_EVENTS`, decoded with its headers, in stream order.
pub async fn stream_events(env: &TestEnv) -> Vec<(async_nats::HeaderMap, ax_domain::event::Event)> {
    use async_nats::jetstream::consumer::{pull, DeliverPolicy};
    use futures::StreamExt;
    let stream = env.bus.jetstream.get_stream(env.names.stream("AX_EVENTS")).await.expect("events stream exists");
    let consumer = stream
        .create_consumer(pull::OrderedConfig { deliver_policy: DeliverPolicy::All, ..Default::default() })
        .await
        .expect("ordered consumer");
    let mut info = stream.clone();
    let total = info.info().await.expect("stream info").state.messages as usize;
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .expect("stream delivers what it holds")
            .expect("stream open")
            .expect("message");
        let headers = message.headers.clone().unwrap_or_default();
        out.push((headers, ax_domain::event::Event::decode(&message.payload).expect("events decode")));
    }
    out
}

/// The path of the `ax` binary built by `scripts/test` (or `cargo build -p ax`).
pub fn ax_binary() -> std::path::PathBuf {
    if let Ok(path) = std::env::var("AX_BIN") {
        return path.into();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/ax");
    assert!(path.exists(), "the ax binary is not built at {}; run `cargo build -p ax` (scripts/test does)", path.display());
    path
}

/// A free loopback port (bound, read and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0").local_addr().expect("local addr").port()
}

/// An `ax` process in this sandbox, killed when dropped.
pub struct AxProcess {
    pub child: tokio::process::Child,
    pub name: String,
}

impl AxProcess {
    pub fn spawn(env: &TestEnv, args: &[&str], extra_env: &[(&str, String)]) -> Self {
        let mut command = tokio::process::Command::new(ax_binary());
        command.args(args).kill_on_drop(true).stdin(std::process::Stdio::null());
        for (k, v) in env.env_vars() {
            command.env(k, v);
        }
        for (k, v) in extra_env {
            command.env(k, v);
        }
        command.env("AX_LOG", std::env::var("AX_TEST_LOG").unwrap_or_else(|_| "warn".into()));
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", ax_binary().display()));
        Self { child, name: args.join(" ") }
    }

    /// Sends SIGKILL and waits for the process to be gone.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Waits until an api at `base` answers `/healthz` with 200.
pub async fn wait_for_api(base: &str) {
    let client = reqwest::Client::new();
    eventually(Duration::from_secs(30), "the api to answer /healthz", || {
        let client = client.clone();
        async move {
            let response = client.get(format!("{base}/healthz")).send().await.ok()?;
            response.status().is_success().then_some(())
        }
    })
    .await;
}

/// Runs of each instance id, counted by the handlers tests install.
pub type RunLog = std::sync::Arc<std::sync::Mutex<Vec<(String, std::time::Instant, std::time::Instant)>>>;

/// A handler that sleeps `ms`, then records (instance id, start, end) in `log`.
pub fn recording_handler(log: RunLog, ms: u64) -> std::sync::Arc<dyn ax_worker::Handler> {
    ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
        let log = log.clone();
        async move {
            let start = std::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push((ctx.instance_id.as_str().to_owned(), start, std::time::Instant::now()));
            Ok(None)
        }
    })
}

/// An instance of `task` as an event trigger would create it, due now. The store keeps
/// one instance per (task, trigger id), so a distinct `trigger_id` makes a distinct instance.
pub fn new_instance(task: &ax_store::TaskRecord, trigger_id: &str) -> ax_store::NewInstance {
    ax_store::NewInstance {
        task_id: task.id.clone(),
        task_name: task.name.clone(),
        task_version: task.version,
        trigger_type: ax_domain::task::TriggerKind::Event,
        trigger_id: trigger_id.into(),
        params: serde_json::json!({}),
        payload_version: None,
        priority: ax_domain::task::Priority::Normal,
        due_at: ax_domain::now(),
        initial: ax_domain::state::StateKind::Created,
        reason: String::new(),
        operator: "test".into(),
        concurrency: None,
        shard: None,
    }
}

/// Instances of a task by state, straight from MySQL.
pub async fn count_in_state(env: &TestEnv, task: &str, state: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = ? AND state = ?")
        .bind(task)
        .bind(state)
        .fetch_one(env.store.pool())
        .await
        .expect("count instances")
}

/// p50, p99 and max of `values` (sorted in place).
pub fn percentiles(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let at = |q: f64| values[((values.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), values[values.len() - 1])
}
