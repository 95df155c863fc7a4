//! The MySQL projection: the authoritative record of tasks and instances.
//!
//! Every state change of an instance goes through [`Store::transition`]: it locks
//! the rows, lets the pure state machine decide, writes the guarded `UPDATE … WHERE
//! id = ? AND state = ? AND attempt = ?`, and appends the audit row and the outbox
//! event, all in one transaction shared by the whole batch.
//!
//! # Layout
//! - [`error`]: the store's error type and the MySQL error mapper
//! - [`tasks`]: registration (versioned, under a row lock), lookup, lifecycle
//! - [`schedules`]: cron schedules, their authoritative next fire, and firing them
//! - [`chains`]: chain edges, cycle refusal, downstream lookup
//! - [`instances`]: creation by trigger id, guarded transitions, queries
//! - [`leader`]: leadership terms and the fence every leader write checks
//! - [`outbox`]: what the relay publishes
//! - [`logs`]: task log lines (the log sink writes, the api reads, retention deletes)
//! - [`alerts`]: alert rules, channels, alerts with history, webhook deliveries
//! - [`audit`]: the audit trail across instances (audit API, `ax audit verify`)
//! - [`health`]: the task health report's numbers
//! - [`monitoring`]: the monitor's gauges and rule inputs
//! - `shapes`: batch statements padded or cut to a few sizes (why: see the module)
//! - `hot`: connections the hot path keeps beside the pool (why: see the module)
//! - `queries/`: the SQL, one file per statement

pub mod chains;
pub mod alerts;
pub mod audit;
pub mod error;
pub mod health;
mod hot;
pub mod instances;
pub mod leader;
pub mod logs;
pub mod monitoring;
pub mod outbox;
pub mod schedules;
mod shapes;
pub mod tasks;

use std::str::FromStr;
use std::sync::Arc;

use ax_domain::subjects::Names;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::ConnectOptions;
use tokio::sync::Notify;

pub use error::StoreError;
pub use leader::Fence;
pub use instances::{
    Applied, CreateOutcome, DispatchView, FutureDue, InstanceFilter, InstanceRecord, NewInstance, Overdue, Refusal, ShardCounts, TransitionRecord,
    TransitionRequest,
};
pub use outbox::{DamagedBatch, OutboxBatch, OutboxEvent};
pub use tasks::{Registered, TaskRecord};

/// Prepared statements kept per connection: about a dozen batch statements in up
/// to 22 sizes each, plus the fixed ones.
const STATEMENT_CACHE: usize = 384;

/// The one migrator, shared by services and tests.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// A handle on the MySQL projection. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: MySqlPool,
    names: Names,
    /// Woken after every commit that wrote to the outbox, so an in-process relay
    /// publishes at once instead of at its next poll.
    outbox_written: Arc<Notify>,
    hot: Arc<hot::HotConnections>,
}

impl Store {
    /// Connects, creating the database named in the URL if it does not exist.
    ///
    /// # Errors
    /// MySQL unreachable, credentials refused, or the database cannot be created.
    pub async fn connect(url: &str, max_connections: u32, names: Names) -> Result<Self, StoreError> {
        Self::connect_with_idle_limit(url, max_connections, names, None).await
    }

    /// [`Store::connect`] where MySQL closes any connection idle for `idle_limit_sec`.
    ///
    /// Schedulers use it: if a scheduler process freezes in the middle of a
    /// transaction, MySQL drops its connections after a few seconds and the locks
    /// they held (the leadership row among them) are released for the next leader.
    /// The pool retires idle connections before MySQL would.
    pub async fn connect_with_idle_limit(url: &str, max_connections: u32, names: Names, idle_limit_sec: Option<u32>) -> Result<Self, StoreError> {
        let options = MySqlConnectOptions::from_str(url).map_err(StoreError::Connect)?;
        // Room for every shape of every batch statement (see `shapes`), so the cache
        // never evicts on the hot path.
        let options = options
            .timezone(Some("+00:00".to_owned()))
            .statement_cache_capacity(STATEMENT_CACHE)
            .log_statements(tracing::log::LevelFilter::Trace);
        if let Some(database) = options.get_database().map(str::to_owned) {
            create_database_if_missing(url, &database).await?;
        }
        // Not on every checkout (sqlx's default): a connection in use moments ago is
        // alive, and the hot path takes a connection per transaction (see `hot`).
        let mut pool = MySqlPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= hot::PING_AFTER_IDLE {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            });
        if let Some(limit) = idle_limit_sec {
            pool = pool
                .min_connections(0)
                .idle_timeout(std::time::Duration::from_secs(u64::from(limit.saturating_sub(1).max(1))))
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        sqlx::query(sqlx::AssertSqlSafe(format!("SET SESSION wait_timeout = {limit}"))).execute(conn).await?;
                        Ok(())
                    })
                });
        } else {
            pool = pool.min_connections(1);
        }
        let pool = pool.connect_with(options).await.map_err(StoreError::Connect)?;
        Ok(Self::with_pool(pool, names, idle_limit_sec))
    }

    pub fn from_pool(pool: MySqlPool, names: Names) -> Self {
        Self::with_pool(pool, names, None)
    }

    fn with_pool(pool: MySqlPool, names: Names, idle_limit_sec: Option<u32>) -> Self {
        let hot = Arc::new(hot::HotConnections::new(pool.options().get_max_connections(), idle_limit_sec));
        Self { pool, names, outbox_written: Arc::new(Notify::new()), hot }
    }

    /// A connection for the hot path (see `hot`).
    pub(crate) async fn hot(&self) -> Result<hot::HotConnection, StoreError> {
        self.hot.take(&self.pool).await
    }

    /// Closes every connection, the hot path's included, and waits until they are.
    pub async fn close(&self) {
        self.hot.release_all();
        self.pool.close().await;
    }

    /// Applies every pending migration.
    ///
    /// # Errors
    /// A migration failed or the recorded history disagrees with the files.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Resolves when some commit wrote outbox rows (or spuriously).
    pub fn outbox_written(&self) -> Arc<Notify> {
        self.outbox_written.clone()
    }

    /// Whether MySQL answers, for health checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ()).map_err(|e| StoreError::query("ping", e))
    }
}

/// Begins one transaction under READ COMMITTED (the connection keeps its default
/// for the next). For transactions whose locking reads need only the rows they
/// name: under REPEATABLE READ those reads also lock gaps and neighbours, and
/// concurrent transactions inserting next to each other's keys wait on and
/// deadlock with each other. A unique key still decides every race.
pub(crate) async fn begin_read_committed<'c>(
    conn: &'c mut sqlx::MySqlConnection,
    what: &'static str,
) -> Result<sqlx::Transaction<'c, sqlx::MySql>, StoreError> {
    use crate::error::Context;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut *conn).await.at(what)?;
    sqlx::Connection::begin(conn).await.at(what)
}

/// `CREATE DATABASE IF NOT EXISTS` through a connection without a default database.
async fn create_database_if_missing(url: &str, database: &str) -> Result<(), StoreError> {
    use sqlx::Connection;
    let server_url = match url.rsplit_once('/') {
        Some((server, _)) if server.contains("://") && !server.ends_with('/') => {
            // Keep the query string (options) if there was one.
            match url.split_once('?') {
                Some((_, query)) => format!("{server}/?{query}"),
                None => server.to_owned(),
            }
        }
        _ => return Ok(()),
    };
    if database.contains('`') {
        return Err(StoreError::InvalidDatabaseName(database.to_owned()));
    }
    let mut conn = sqlx::mysql::MySqlConnection::connect(&server_url).await.map_err(StoreError::Connect)?;
    let sql = format!("CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.map_err(|e| StoreError::query("create database", e))?;
    conn.close().await.ok();
    Ok(())
}
