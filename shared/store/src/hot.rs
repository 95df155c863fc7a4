//! Connections for the hot path: kept beside the sqlx pool rather than returned to it.
//!
//! sqlx pings a connection every time it goes back to its pool (unconditionally)
//! and, by default, every time it is taken out. In the throughput benchmark that
//! was 2.1 pings per instance beside 3.6 statements (`Com_admin_commands` against
//! `Questions`): a third of the round trips to MySQL, each one waking a server
//! thread, on the path of every report, dispatch and trigger batch. A connection
//! here goes back to a short stack without a ping. One idle for a second is pinged
//! before it is used again; one idle longer than its server would keep it is
//! closed; one whose user did not say it ended cleanly is closed. A connection the
//! server dropped within a second of its last use fails the one operation that
//! takes it (and is closed); callers retry as they do after any MySQL error.
//!
//! The connections stay checked out of the sqlx pool, so `max_connections` still
//! bounds the process; the stack keeps at most half of them.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlConnection, MySqlPool};

use crate::error::{Context, StoreError};

/// A connection idle this long is pinged before it is handed out (here and by the pool).
pub(crate) const PING_AFTER_IDLE: Duration = Duration::from_secs(1);
/// A connection idle this long is closed instead (without a server-side limit).
const CLOSE_AFTER_IDLE: Duration = Duration::from_secs(30);

pub(crate) struct HotConnections {
    /// Most recently used last: the busy few stay warm, the rest age out.
    idle: Mutex<Vec<(PoolConnection<MySql>, Instant)>>,
    keep_at_most: usize,
    close_after_idle: Duration,
}

impl HotConnections {
    /// `server_idle_limit`: the session `wait_timeout` the pool sets, if any; a
    /// connection is closed here a second before the server would drop it.
    pub(crate) fn new(max_connections: u32, server_idle_limit: Option<u32>) -> Self {
        let close_after_idle = match server_idle_limit {
            Some(limit) => Duration::from_secs(u64::from(limit.saturating_sub(1).max(1))),
            None => CLOSE_AFTER_IDLE,
        };
        Self { idle: Mutex::default(), keep_at_most: (max_connections / 2).max(1) as usize, close_after_idle }
    }

    /// A live connection: the most recently used idle one, else one from the pool.
    pub(crate) async fn take(self: &Arc<Self>, pool: &MySqlPool) -> Result<HotConnection, StoreError> {
        loop {
            let popped = self.idle.lock().expect("hot connections lock").pop();
            let Some((mut conn, since)) = popped else {
                let conn = pool.acquire().await.at("acquire a connection")?;
                return Ok(HotConnection { conn: Some(conn), home: self.clone(), clean: false });
            };
            let idle_for = since.elapsed();
            if idle_for >= self.close_after_idle {
                conn.close_on_drop();
                continue;
            }
            if idle_for >= PING_AFTER_IDLE && sqlx::Connection::ping(&mut *conn).await.is_err() {
                conn.close_on_drop();
                continue;
            }
            return Ok(HotConnection { conn: Some(conn), home: self.clone(), clean: false });
        }
    }

    /// Hands every idle connection back to the sqlx pool (before it closes).
    pub(crate) fn release_all(&self) {
        self.idle.lock().expect("hot connections lock").clear();
    }

    fn put_back(&self, conn: PoolConnection<MySql>) {
        let mut idle = self.idle.lock().expect("hot connections lock");
        // The oldest sit at the front: close the ones past their time while here.
        while idle.first().is_some_and(|(_, since)| since.elapsed() >= self.close_after_idle) {
            let (mut old, _) = idle.remove(0);
            old.close_on_drop();
        }
        if idle.len() < self.keep_at_most {
            idle.push((conn, Instant::now()));
        }
        // Otherwise it drops here and goes back to the sqlx pool.
    }
}

/// A connection from [`HotConnections`]. Call [`HotConnection::done`] after the
/// last statement succeeded; dropped without it (an error, a cancelled future),
/// the connection is closed, since its state is not known.
pub(crate) struct HotConnection {
    conn: Option<PoolConnection<MySql>>,
    home: Arc<HotConnections>,
    clean: bool,
}

impl HotConnection {
    pub(crate) fn done(mut self) {
        self.clean = true;
    }
}

impl Deref for HotConnection {
    type Target = MySqlConnection;

    fn deref(&self) -> &MySqlConnection {
        self.conn.as_ref().expect("present until drop")
    }
}

impl DerefMut for HotConnection {
    fn deref_mut(&mut self) -> &mut MySqlConnection {
        self.conn.as_mut().expect("present until drop")
    }
}

impl Drop for HotConnection {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        if self.clean {
            self.home.put_back(conn);
        } else {
            conn.close_on_drop();
        }
    }
}
