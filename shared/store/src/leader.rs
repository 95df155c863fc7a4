//! Leadership terms. The scheduler that holds the MySQL named lock claims a new
//! term (epoch + 1); every leader write checks, under a shared lock on the term row,
//! that its epoch is still current. A claim needs the row's exclusive lock, so a
//! write from an old term either commits before the new term begins or not at all.

use ax_domain::Timestamp;
use sqlx::MySqlConnection;

use crate::error::{Context, StoreError};
use crate::Store;

/// The term a leader write belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub epoch: u64,
}

impl Store {
    /// Begins a new leadership term for `holder` and returns it. Call only while
    /// holding the leader lock.
    pub async fn claim_leadership(&self, holder: &str, now: Timestamp) -> Result<Fence, StoreError> {
        let mut tx = self.pool.begin().await.at("begin claim leadership")?;
        sqlx::query("UPDATE scheduler_leader SET epoch = epoch + 1, holder = ?, acquired_at = ? WHERE id = 1")
            .bind(holder)
            .bind(now)
            .execute(&mut *tx)
            .await
            .at("claim leadership")?;
        let epoch: u64 = sqlx::query_scalar("SELECT epoch FROM scheduler_leader WHERE id = 1")
            .fetch_one(&mut *tx)
            .await
            .at("read leadership epoch")?;
        tx.commit().await.at("commit claim leadership")?;
        Ok(Fence { epoch })
    }

    /// The current term and its holder.
    pub async fn leadership(&self) -> Result<(u64, String), StoreError> {
        sqlx::query_as("SELECT epoch, holder FROM scheduler_leader WHERE id = 1").fetch_one(&self.pool).await.at("read leadership")
    }
}

/// Fails the surrounding transaction unless `fence` is the current term. The shared
/// lock it takes is held until commit, so the term cannot change underneath.
pub(crate) async fn check_fence(conn: &mut MySqlConnection, fence: Fence) -> Result<(), StoreError> {
    // LOCK IN SHARE MODE rather than FOR SHARE: MariaDB 10.11 knows only the former.
    let current: u64 = sqlx::query_scalar("SELECT epoch FROM scheduler_leader WHERE id = 1 LOCK IN SHARE MODE")
        .fetch_one(conn)
        .await
        .at("check leadership fence")?;
    if current == fence.epoch {
        Ok(())
    } else {
        Err(StoreError::Fenced { expected: fence.epoch, current })
    }
}

/// The leader lock: a MySQL named lock on a connection of its own (a pooled
/// connection could be handed to someone else, or closed, taking the lock along).
///
/// The connection's `wait_timeout` is short, so if the holder freezes MySQL drops
/// the connection and the lock within seconds; the holder's checks keep it busy
/// while it is alive. A killed holder loses it at once.
pub struct LeaderLock {
    conn: MySqlConnection,
    name: String,
}

impl Store {
    /// Opens the dedicated connection. The lock is named after the database, so
    /// installations sharing a MySQL server do not contend.
    pub async fn leader_lock(&self, idle_timeout_sec: u32) -> Result<LeaderLock, StoreError> {
        use sqlx::{ConnectOptions, Connection};
        let options = (*self.pool.connect_options()).clone().log_statements(tracing::log::LevelFilter::Trace);
        let database = options.get_database().unwrap_or("default").to_owned();
        let mut conn = MySqlConnection::connect_with(&options).await.map_err(StoreError::Connect)?;
        sqlx::query(sqlx::AssertSqlSafe(format!("SET SESSION wait_timeout = {idle_timeout_sec}")))
            .execute(&mut conn)
            .await
            .at("shorten lock connection timeout")?;
        let name: String = format!("ax.leader.{database}").chars().take(64).collect();
        Ok(LeaderLock { conn, name })
    }
}

impl LeaderLock {
    /// Waits up to `wait_sec` for the lock; `true` once held.
    pub async fn acquire(&mut self, wait_sec: u32) -> Result<bool, StoreError> {
        let got: Option<i64> =
            sqlx::query_scalar("SELECT GET_LOCK(?, ?)").bind(&self.name).bind(wait_sec).fetch_one(&mut self.conn).await.at("get leader lock")?;
        Ok(got == Some(1))
    }

    /// Whether this connection still holds the lock.
    pub async fn held(&mut self) -> Result<bool, StoreError> {
        let held: Option<i64> = sqlx::query_scalar("SELECT IS_USED_LOCK(?) = CONNECTION_ID()")
            .bind(&self.name)
            .fetch_one(&mut self.conn)
            .await
            .at("check leader lock")?;
        Ok(held == Some(1))
    }

    pub async fn release(mut self) {
        use sqlx::Connection;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)").bind(&self.name).execute(&mut self.conn).await;
        let _ = self.conn.close().await;
    }
}
