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
        let client = client(url)?;
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
        let client = client(url)?;
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

/// The timer index: one sorted set of everything that becomes due at a known time
/// (delayed instances, retry back-offs, planned cron fires), scored by due time in
/// milliseconds.
///
/// One key rather than the seed's hour shards: `ZRANGEBYSCORE` costs O(log N + M),
/// so a million entries are as cheap to read from as a thousand, and a single key
/// makes "what is due next" one O(log N) call with no shard boundaries to cross.
/// MySQL holds every due time too; the leader rebuilds this set from MySQL, so a
/// flush costs precision for a moment, never a fire.
#[derive(Clone)]
pub struct DueIndex {
    conn: ConnectionManager,
    key: String,
}

impl DueIndex {
    pub fn new(queues: &WorkerQueues) -> Self {
        Self { conn: queues.conn.clone(), key: format!("{}:due", queues.names.namespace()) }
    }

    /// Adds or moves entries (idempotent).
    pub async fn add(&self, entries: &[(String, i64)]) -> Result<(), QueueError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for chunk in entries.chunks(1000) {
            let items: Vec<(i64, &str)> = chunk.iter().map(|(member, due)| (*due, member.as_str())).collect();
            pipe.zadd_multiple(&self.key, &items).ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(|source| QueueError::Command { what: "index due entries", source })
    }

    /// The soonest entry's due time, if any.
    pub async fn earliest(&self) -> Result<Option<i64>, QueueError> {
        let mut conn = self.conn.clone();
        let first: Vec<(String, f64)> = conn
            .zrange_withscores(&self.key, 0, 0)
            .await
            .map_err(|source| QueueError::Command { what: "peek due index", source })?;
        Ok(first.first().map(|(_, score)| *score as i64))
    }

    /// Entries due at or before `now_ms`, soonest first.
    pub async fn due(&self, now_ms: i64, limit: usize) -> Result<Vec<(String, i64)>, QueueError> {
        let mut conn = self.conn.clone();
        let due: Vec<(String, f64)> = conn
            .zrangebyscore_limit_withscores(&self.key, "-inf", now_ms, 0, limit as isize)
            .await
            .map_err(|source| QueueError::Command { what: "read due entries", source })?;
        Ok(due.into_iter().map(|(m, s)| (m, s as i64)).collect())
    }

    pub async fn remove(&self, members: &[String]) -> Result<(), QueueError> {
        if members.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        conn.zrem::<_, _, ()>(&self.key, members).await.map_err(|source| QueueError::Command { what: "remove due entries", source })
    }

    pub async fn count(&self) -> Result<u64, QueueError> {
        let mut conn = self.conn.clone();
        conn.zcard(&self.key).await.map_err(|source| QueueError::Command { what: "count due entries", source })
    }
}

impl WorkerQueues {
    /// Marks Redis as holding this leader's state (see [`Names::redis_sentinel`]).
    pub async fn set_sentinel(&self, value: &str) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        conn.set::<_, _, ()>(self.names.redis_sentinel(), value).await.map_err(|source| QueueError::Command { what: "set sentinel", source })
    }

    /// Whether the sentinel is still there; `false` after a flush or a Redis restart.
    pub async fn sentinel_present(&self) -> Result<bool, QueueError> {
        let mut conn = self.conn.clone();
        conn.exists(self.names.redis_sentinel()).await.map_err(|source| QueueError::Command { what: "check sentinel", source })
    }
}

/// Execution guards (seed 4.1, second layer): `SET NX EX` keys a worker must hold
/// to run an attempt — one per instance, and one per task when the task allows a
/// single running instance — so an old run and a new attempt never overlap even if
/// MySQL and the scheduler were wrong.
///
/// The seed sets the TTL to twice the timeout so a stuck task's guard cannot expire
/// early. AX instead gives it one lease and has the holder refresh it with every
/// heartbeat: a live holder's guard never expires early either, and a crashed
/// holder's guard is gone when its lease is, so its retry starts within one lease
/// (invariant 4) instead of waiting up to twice the timeout. A holder that cannot
/// renew its lease stops its work itself, before its guard lapses.
#[derive(Clone)]
pub struct ExecutionGuards {
    conn: ConnectionManager,
}

impl ExecutionGuards {
    pub async fn connect(url: &str) -> Result<Self, QueueError> {
        let client = client(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = client.get_connection_manager_with_config(config).await.map_err(QueueError::Connect)?;
        Ok(Self { conn })
    }

    /// Takes `key` for `holder`; `Ok(None)` when taken, `Ok(Some(current))` naming
    /// who holds it otherwise.
    pub async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<String>, QueueError> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(holder)
            .arg("NX")
            .arg("EX")
            .arg(ttl.as_secs().max(1))
            .query_async(&mut conn)
            .await
            .map_err(|source| QueueError::Command { what: "take execution guard", source })?;
        if set.is_some() {
            return Ok(None);
        }
        let current: Option<String> = conn.get(key).await.map_err(|source| QueueError::Command { what: "read execution guard", source })?;
        match current {
            // Our own (a redelivered assignment of the same attempt): ours still.
            Some(current) if current == holder => Ok(None),
            Some(current) => Ok(Some(current)),
            // Expired between the two calls: try once more.
            None => Box::pin(self.acquire(key, holder, ttl)).await,
        }
    }

    /// Releases `key` if `holder` still holds it (never someone else's).
    pub async fn release(&self, key: &str, holder: &str) -> Result<(), QueueError> {
        let script = redis::Script::new("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end");
        let mut conn = self.conn.clone();
        script.key(key).arg(holder).invoke_async::<i64>(&mut conn).await.map_err(|source| QueueError::Command { what: "release execution guard", source })?;
        Ok(())
    }
}

impl ExecutionGuards {
    /// The recorded result of a side effect, if one was recorded.
    pub async fn recall(&self, key: &str) -> Result<Option<String>, QueueError> {
        let mut conn = self.conn.clone();
        conn.get(key).await.map_err(|source| QueueError::Command { what: "read side effect record", source })
    }

    /// Records that a side effect happened, with its result, for `ttl`.
    pub async fn remember(&self, key: &str, result: &str, ttl: Duration) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        conn.set_ex::<_, _, ()>(key, result, ttl.as_secs().max(1))
            .await
            .map_err(|source| QueueError::Command { what: "record side effect", source })
    }
}

impl WorkerInbox {
    /// Takes whatever is still queued for this worker without waiting (to hand it
    /// back on shutdown).
    pub async fn drain(&mut self) -> Result<Vec<Assignment>, QueueError> {
        let mut out = Vec::new();
        for key in self.keys.clone() {
            loop {
                let body: Option<String> =
                    self.conn.lpop(&key, None).await.map_err(|source| QueueError::Command { what: "drain queue", source })?;
                match body {
                    Some(body) => match serde_json::from_str(&body) {
                        Ok(assignment) => out.push(assignment),
                        Err(_) => tracing::warn!(entry = %body, "undecodable queue entry dropped while draining"),
                    },
                    None => break,
                }
            }
        }
        Ok(out)
    }
}

impl ExecutionGuards {
    /// Extends `key` to `ttl` if `holder` still holds it, and takes it again if it
    /// vanished (Redis flushed or restarted): the holder is still running, so the
    /// guard is rebuilt from the one who knows. `false` if someone else holds it.
    pub async fn refresh(&self, key: &str, holder: &str, ttl: Duration) -> Result<bool, QueueError> {
        let script = redis::Script::new(
            "local v = redis.call('GET', KEYS[1]) \
             if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
             elseif not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 \
             else return 0 end",
        );
        let mut conn = self.conn.clone();
        let done: i64 = script
            .key(key)
            .arg(holder)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(|source| QueueError::Command { what: "refresh execution guard", source })?;
        Ok(done == 1)
    }
}

/// A client whose connections send at once (`TCP_NODELAY`): with Nagle's algorithm a
/// command written while the previous one is unacknowledged waits for the server's
/// delayed ACK, up to 40 ms on Linux.
fn client(url: &str) -> Result<redis::Client, QueueError> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info().map_err(QueueError::Connect)?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    redis::Client::open(info.set_tcp_settings(tcp)).map_err(QueueError::Connect)
}
