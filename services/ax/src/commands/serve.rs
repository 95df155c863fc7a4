//! The long-running subcommands. Each reads as a boot sequence: connect, migrate or
//! apply definitions, spawn, wait for a signal, drain.

use std::process::ExitCode;

use anyhow::Context as _;
use ax_bus::Bus;
use ax_queue::WorkerQueues;
use ax_runtime::Config;
use ax_store::Store;
use tokio_util::sync::CancellationToken;

pub(crate) async fn store(config: &Config) -> anyhow::Result<Store> {
    Store::connect(config.mysql.mysql_url.expose(), config.mysql.mysql_max_connections, config.nats.names())
        .await
        .with_context(|| format!("connecting to MySQL at {} (is it running? scripts/services starts it)", config.mysql.mysql_url))
}

pub(crate) async fn bus(config: &Config, name: &str) -> anyhow::Result<Bus> {
    Bus::connect(config.nats.nats_url.expose(), config.nats.names(), name)
        .await
        .with_context(|| format!("connecting to NATS at {} (is it running with JetStream? scripts/services starts it)", config.nats.nats_url))
}

async fn queues(config: &Config) -> anyhow::Result<WorkerQueues> {
    WorkerQueues::connect(config.redis.redis_url.expose(), config.nats.names())
        .await
        .with_context(|| format!("connecting to Redis at {} (is it running? scripts/services starts it)", config.redis.redis_url))
}

fn shutdown_on_signals() -> CancellationToken {
    let root = CancellationToken::new();
    ax_runtime::shutdown::on_signals(root.clone());
    root
}

pub async fn migrate(config: Config) -> anyhow::Result<ExitCode> {
    store(&config).await?.migrate().await.context("applying migrations")?;
    println!("migrations applied");
    Ok(ExitCode::SUCCESS)
}

pub async fn nats_apply(config: Config) -> anyhow::Result<ExitCode> {
    let bus = bus(&config, "ax nats apply").await?;
    bus.apply_definitions().await.context("applying NATS definitions")?;
    for stream in bus.stream_configs()? {
        println!("stream {} applied ({})", stream.name, stream.subjects.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

/// How long MySQL keeps an idle scheduler connection: short, so a frozen
/// scheduler's open transactions cannot hold the next leader back for long.
const SCHEDULER_IDLE_LIMIT_SEC: u32 = 4;

pub async fn scheduler(config: Config) -> anyhow::Result<ExitCode> {
    let store = Store::connect_with_idle_limit(
        config.mysql.mysql_url.expose(),
        config.mysql.mysql_max_connections,
        config.nats.names(),
        Some(SCHEDULER_IDLE_LIMIT_SEC),
    )
    .await
    .with_context(|| format!("connecting to MySQL at {} (is it running? scripts/services starts it)", config.mysql.mysql_url))?;
    let deps = ax_scheduler::Deps { store, bus: bus(&config, "ax scheduler").await?, queues: queues(&config).await? };
    let shutdown = shutdown_on_signals();
    serve_metrics(config.observe.monitor.metrics_addr, &shutdown);
    ax_scheduler::run(config, deps, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// `/metrics` and `/healthz` on AX_METRICS_ADDR, when it is set.
fn serve_metrics(addr: Option<std::net::SocketAddr>, shutdown: &CancellationToken) {
    let Some(addr) = addr else { return };
    let token = shutdown.child_token();
    let root = shutdown.clone();
    tokio::spawn(async move {
        if let Err(err) = ax_runtime::metrics_server::serve(addr, token).await {
            tracing::error!(error = ?err, "metrics listener failed; shutting down");
            root.cancel();
        }
    });
}

/// Where `ax monitor` serves its metrics when AX_METRICS_ADDR is not set: the
/// monitor's metrics are its point.
const MONITOR_METRICS_ADDR: &str = "127.0.0.1:9464";

pub async fn monitor(config: Config) -> anyhow::Result<ExitCode> {
    let deps = ax_monitor::Deps { store: store(&config).await?, bus: bus(&config, "ax monitor").await?, queues: queues(&config).await? };
    let shutdown = shutdown_on_signals();
    let addr = config.observe.monitor.metrics_addr.unwrap_or_else(|| MONITOR_METRICS_ADDR.parse().expect("a valid address"));
    serve_metrics(Some(addr), &shutdown);
    ax_monitor::run(config, deps, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn log_sink(config: Config) -> anyhow::Result<ExitCode> {
    let deps = ax_log_sink::Deps { store: store(&config).await?, bus: bus(&config, "ax log-sink").await? };
    let shutdown = shutdown_on_signals();
    serve_metrics(config.observe.monitor.metrics_addr, &shutdown);
    ax_log_sink::run(config, deps, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn api(config: Config) -> anyhow::Result<ExitCode> {
    let bus = bus(&config, "ax api").await?;
    bus.apply_definitions().await.context("applying NATS definitions")?;
    let shutdown = shutdown_on_signals();
    let workers = ax_api::workers::Directory::start(&bus, shutdown.clone()).await.context("listening to worker heartbeats")?;
    let state = ax_api::AppState { store: store(&config).await?, bus, metrics: ax_runtime::telemetry::prometheus(), workers, lease: config.scheduler.lease.0 };
    ax_api::run(config.http.http_addr, state, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn chain(config: Config) -> anyhow::Result<ExitCode> {
    let store = store(&config).await?;
    let bus = bus(&config, "ax chain").await?;
    ax_chain::run(store, bus, shutdown_on_signals()).await?;
    Ok(ExitCode::SUCCESS)
}

fn builtin_worker(config: Config) -> ax_worker::Worker {
    ax_worker::Worker::builder(config)
        .handler("shell", ax_worker::handlers::shell())
        .handler("noop", ax_worker::handlers::noop())
        .handler("http", ax_worker::handlers::http())
        .build()
}

pub async fn worker(config: Config) -> anyhow::Result<ExitCode> {
    let shutdown = shutdown_on_signals();
    serve_metrics(config.observe.monitor.metrics_addr, &shutdown);
    let worker = builtin_worker(config);
    worker.run(shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// The demo task `ax dev` registers.
const DEMO_TASK: &str = r#"{
  "task_name": "demo_hello",
  "owner": "you",
  "description": "Prints a greeting; try triggering it",
  "triggers": [{"type": "event"}],
  "execution": {
    "handler": "shell",
    "config": {"command": "echo \"hello from attempt $AX_ATTEMPT of $AX_INSTANCE_ID with $AX_PARAMS\""},
    "timeout": 60,
    "retry": {"max_attempts": 3, "backoff": "exp", "initial_interval_sec": 5}
  }
}"#;

pub async fn dev(config: Config) -> anyhow::Result<ExitCode> {
    let _ = ax_runtime::telemetry::prometheus();
    let store = store(&config).await?;
    store.migrate().await.context("applying migrations")?;
    let bus = bus(&config, "ax dev").await?;
    bus.apply_definitions().await.context("applying NATS definitions")?;
    let queues = queues(&config).await?;
    let shutdown = shutdown_on_signals();

    let definition = ax_domain::task::TaskDefinition::from_json(DEMO_TASK.as_bytes()).expect("the demo task is valid");
    let demo = store.register_task(&definition, "ax dev").await.context("registering the demo task")?;

    let mut services = tokio::task::JoinSet::new();
    let deps = ax_scheduler::Deps { store: store.clone(), bus: bus.clone(), queues: queues.clone() };
    services.spawn(ax_scheduler::run(config.clone(), deps, shutdown.child_token()));
    services.spawn(ax_chain::run(store.clone(), bus.clone(), shutdown.child_token()));
    let deps = ax_monitor::Deps { store: store.clone(), bus: bus.clone(), queues: queues.clone() };
    services.spawn(ax_monitor::run(config.clone(), deps, shutdown.child_token()));
    let deps = ax_log_sink::Deps { store: store.clone(), bus: bus.clone() };
    services.spawn(ax_log_sink::run(config.clone(), deps, shutdown.child_token()));
    let workers = ax_api::workers::Directory::start(&bus, shutdown.clone()).await.context("listening to worker heartbeats")?;
    let state = ax_api::AppState { store, bus: bus.clone(), metrics: ax_runtime::telemetry::prometheus(), workers, lease: config.scheduler.lease.0 };
    services.spawn(ax_api::run(config.http.http_addr, state, shutdown.child_token()));
    let worker = builtin_worker(config.clone());
    services.spawn(worker.run_with(bus, shutdown.child_token()));

    let api = &config.http.api_url;
    let ns = config.nats.names();
    println!(
        "\nAX is running (namespace {ns}, demo task demo_hello v{version}). Try:\n\
         \n  curl -s -X POST {api}/api/v1/tasks/demo_hello/trigger -d '{{\"params\": {{\"order\": 42}}}}'\
         \n  ax trigger demo_hello --params '{{\"order\": 42}}'\
         \n  ax events tail                      # every transition, live, as JSON lines\
         \n  ax logs -f <instance id>            # its log, live (stdout and stderr of the shell task)\
         \n  ax alert list                       # alerts; ax alert channel apply -f hook.json to be told\
         \n  ax audit verify                     # the event stream against MySQL's audit trail\
         \n  ax report health                    # tasks failing in a row, not firing, slow\
         \n  ax instance <instance id>           # state, worker and audit trail\
         \n  curl -s {api}/api/v1/tasks | jq\
         \n  curl -s {api}/api/v1/schema/task    # the JSON Schema of a definition\
         \n  curl -s {api}/metrics\
         \n\nCtrl-C stops everything.\n",
        ns = ns.namespace(),
        version = demo.task.version,
    );
    while let Some(done) = services.join_next().await {
        if let Ok(Err(err)) = done {
            tracing::error!(error = ?err, "a service failed; shutting down");
            shutdown.cancel();
        }
    }
    Ok(ExitCode::SUCCESS)
}
