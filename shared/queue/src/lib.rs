//! Redis: each worker's ready queues. Redis only accelerates: MySQL says which
//! instance is dispatched to whom, so anything lost here is found again from MySQL.
//!
//! # Layout
//! - [`WorkerQueues`]: push an assignment to a worker, and the worker's blocking pop.
//!   Each worker has one list per priority level; a pop asks for them in order
//!   (urgent, normal, low), so a worker always takes urgent work first and, within
//!   a level, the oldest.

use std::time::Duration;

use ax_domain::protocol::Assignment;
use ax_domain::subjects::Names;
use ax_domain::task::Priority;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::AsyncCommands;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("cannot connect to Redis")]
    Connect(#[source] redis::RedisError),
    #[error("{what} failed")]
    Command { what: &'static str, #[source] source: redis::RedisError },
    #[error("queue entry is not an assignment: {0}")]
    Malformed(String),
}

const LEVELS: [Priority; 3] = [Priority::Urgent, Priority::Normal, Priority::Low];

/// Pushing side (schedulers). Cheap to clone; reconnects on its own.
#[derive(Clone)]
pub struct WorkerQueues {
    conn: ConnectionManager,
    names: Names,
}

impl WorkerQueues {
    /// # Errors
    /// Redis unreachable.
    pub async fn connect(url: &str, names: Names) -> Result<Self, QueueError> {
        let client = redis::Client::open(url).map_err(QueueError::Connect)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = client.get_connection_manager_with_config(config).await.map_err(QueueError::Connect)?;
        Ok(Self { conn, names })
    }

    fn key(&self, worker: &str, priority: Priority) -> String {
        format!("{}:{}", self.names.worker_queue(worker), priority.as_str())
    }

    /// Appends assignments to their workers' queues in one round trip.
    ///
    /// # Errors
    /// Redis unavailable; the caller's instances stay DISPATCHED in MySQL and are
    /// recovered when their lease expires.
    pub async fn push(&self, assignments: &[(String, Assignment)]) -> Result<(), QueueError> {
        if assignments.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (worker, assignment) in assignments {
            let body = serde_json::to_string(assignment).expect("assignments always serialize");
            pipe.rpush(self.key(worker, assignment.priority), body).ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(|source| QueueError::Command { what: "push assignments", source })
    }

    /// How many assignments wait for `worker`, all levels together.
    pub async fn depth(&self, worker: &str) -> Result<u64, QueueError> {
        let mut pipe = redis::pipe();
        for level in LEVELS {
            pipe.llen(self.key(worker, level));
        }
        let mut conn = self.conn.clone();
        let counts: Vec<u64> =
            pipe.query_async(&mut conn).await.map_err(|source| QueueError::Command { what: "queue depth", source })?;
        Ok(counts.iter().sum())
    }

    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }
}

/// Popping side: one worker's blocking reads, on a connection of its own so a
/// long `BLPOP` never delays other commands.
pub struct WorkerInbox {
    conn: MultiplexedConnection,
    keys: Vec<String>,
}

impl WorkerInbox {
    /// # Errors
    /// Redis unreachable.
    pub async fn connect(url: &str, names: &Names, worker: &str) -> Result<Self, QueueError> {
        let client = redis::Client::open(url).map_err(QueueError::Connect)?;
        // BLPOP blocks server-side for up to its own timeout; the client must wait longer.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(None);
        let conn = client.get_multiplexed_async_connection_with_config(&config).await.map_err(QueueError::Connect)?;
        let base = names.worker_queue(worker);
        let keys = LEVELS.iter().map(|level| format!("{base}:{}", level.as_str())).collect();
        Ok(Self { conn, keys })
    }

    /// Waits up to `wait` for the next assignment, urgent first.
    ///
    /// # Errors
    /// Redis unavailable, or an entry that does not decode (it is dropped; the
    /// instance it named is recovered from MySQL by lease expiry).
    pub async fn pop(&mut self, wait: Duration) -> Result<Option<Assignment>, QueueError> {
        let popped: Option<(String, String)> = self
            .conn
            .blpop(&self.keys, wait.as_secs_f64())
            .await
            .map_err(|source| QueueError::Command { what: "pop assignment", source })?;
        match popped {
            None => Ok(None),
            Some((_, body)) => serde_json::from_str(&body).map(Some).map_err(|_| QueueError::Malformed(body)),
        }
    }
}
