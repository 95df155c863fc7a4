//! A scenario's private corner of the shared servers: its own MySQL database and its
//! own namespace (subjects, stream names, Redis keys), like the tests' sandbox. The
//! prefix is `axb_`, so `scripts/test` (which drops leftover `axt_*` databases) never
//! pulls a database from under a running benchmark.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use ax_bus::Bus;
use ax_domain::subjects::Names;
use ax_queue::WorkerQueues;
use ax_store::{Store, TaskRecord};

use crate::procs::Process;

/// Where the backing services are: `AX_BENCH_MYSQL_URL` (a server, no database),
/// `AX_BENCH_REDIS_URL`, `AX_BENCH_NATS_URL`, loopback by default.
#[derive(Debug, Clone)]
pub struct Servers {
    pub mysql: String,
    pub redis: String,
    pub nats: String,
}

impl Servers {
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        Self {
            mysql: var("AX_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306").trim_end_matches('/').to_owned(),
            redis: var("AX_BENCH_REDIS_URL", "redis://127.0.0.1:6379"),
            nats: var("AX_BENCH_NATS_URL", "nats://127.0.0.1:4222"),
        }
    }
}

/// One scenario's sandbox and the `ax` processes it started.
pub struct BenchEnv {
    pub label: &'static str,
    pub namespace: String,
    pub names: Names,
    pub database: String,
    pub mysql_url: String,
    pub store: Store,
    pub bus: Bus,
    pub queues: WorkerQueues,
    pub servers: Servers,
    log_dir: PathBuf,
}

impl BenchEnv {
    /// A fresh, migrated database and a fresh namespace with its streams applied.
    ///
    /// # Errors
    /// A service is unreachable; the message names it and `scripts/services`.
    pub async fn new(label: &'static str, servers: &Servers, log_dir: &Path, pool_size: u32) -> anyhow::Result<Self> {
        let id = ulid::Ulid::new().to_string().to_ascii_lowercase();
        let namespace = format!("axb_{label}_{}", &id[id.len() - 10..]);
        let names = Names::new(&namespace);
        let database = namespace.clone();
        let mysql_url = format!("{}/{database}", servers.mysql);
        let hint = "start it with scripts/services (scripts/bench does this first)";
        let store = Store::connect(&mysql_url, pool_size, names.clone())
            .await
            .with_context(|| format!("MySQL/MariaDB at {} is unreachable; {hint}", servers.mysql))?;
        store.migrate().await.context("migrating the benchmark database")?;
        let bus = Bus::connect(&servers.nats, names.clone(), &format!("ax-bench {label}"))
            .await
            .with_context(|| format!("NATS at {} is unreachable; {hint}", servers.nats))?;
        bus.apply_definitions().await.with_context(|| format!("NATS at {} refused the stream definitions (JetStream on?); {hint}", servers.nats))?;
        let queues = WorkerQueues::connect(&servers.redis, names.clone())
            .await
            .with_context(|| format!("Redis at {} is unreachable; {hint}", servers.redis))?;
        let mut conn = queues.connection();
        redis::cmd("PING").query_async::<String>(&mut conn).await.with_context(|| format!("Redis at {} does not answer; {hint}", servers.redis))?;
        std::fs::create_dir_all(log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        Ok(Self { label, namespace, names, database, mysql_url, store, bus, queues, servers: servers.clone(), log_dir: log_dir.to_owned() })
    }

    /// The environment an `ax` process needs to join this sandbox.
    pub fn env_vars(&self) -> Vec<(String, String)> {
        vec![
            ("AX_MYSQL_URL".into(), self.mysql_url.clone()),
            ("AX_REDIS_URL".into(), self.servers.redis.clone()),
            ("AX_NATS_URL".into(), self.servers.nats.clone()),
            ("AX_NAMESPACE".into(), self.namespace.clone()),
            ("AX_LOG".into(), std::env::var("AX_BENCH_SERVICE_LOG").unwrap_or_else(|_| "warn".into())),
        ]
    }

    /// Starts `program args` in this sandbox, logging to `<log dir>/<label>-<name>.log`.
    ///
    /// # Errors
    /// The program cannot start.
    pub fn spawn(&self, name: &str, program: &Path, args: &[&str]) -> anyhow::Result<Process> {
        let log = self.log_dir.join(format!("{}-{name}.log", self.label));
        Process::spawn(name, program, args, &self.env_vars(), &log)
    }

    /// Registers a task from JSON.
    ///
    /// # Errors
    /// An invalid definition (a bug here) or MySQL failing.
    pub async fn register(&self, json: serde_json::Value) -> anyhow::Result<TaskRecord> {
        let definition = ax_domain::task::TaskDefinition::from_json(json.to_string().as_bytes())
            .map_err(|e| anyhow::anyhow!("benchmark task definition is invalid: {e}"))?;
        Ok(self.store.register_task(&definition, "ax-bench").await?.task)
    }

    /// Waits until some scheduler of this sandbox leads; returns its term and holder.
    ///
    /// # Errors
    /// No leader within `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<(u64, String)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (epoch, holder) = self.store.leadership().await?;
            if epoch > 0 && !holder.is_empty() {
                return Ok((epoch, holder));
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "no scheduler became leader within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Drops what this sandbox made: its streams, its database, its Redis keys.
    pub async fn cleanup(self) {
        for stream in self.bus.stream_configs().unwrap_or_default() {
            let _ = self.bus.jetstream.delete_stream(&stream.name).await;
        }
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.database);
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(self.store.pool()).await;
        let mut conn = self.queues.connection();
        let pattern = format!("{}:*", self.namespace);
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap_or_default();
        if !keys.is_empty() {
            let _ = redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await;
        }
        self.store.close().await;
    }
}

/// A task whose handler is `handler`, fired by events (`ax.trigger.<task>`).
pub fn event_task(name: &str, handler: &str) -> serde_json::Value {
    serde_json::json!({
        "task_name": name,
        "owner": "ax-bench",
        "description": "benchmark task",
        "triggers": [{"type": "event"}],
        "execution": {"handler": handler, "timeout": 60}
    })
}
