//! One error type for the store and the one place that reads MySQL error numbers.

/// MySQL error numbers the store reacts to (the SQLSTATE `23000` alone is not
/// enough: MySQL also uses it for foreign-key and NOT NULL violations).
const ER_DUP_ENTRY: u16 = 1062;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to MySQL")]
    Connect(#[source] sqlx::Error),
    #[error("database name {0:?} is not allowed")]
    InvalidDatabaseName(String),
    #[error("migrations failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A unique key already holds this value.
    #[error("{what}: already exists")]
    Conflict { what: &'static str },
    /// A lock could not be had in time, or a deadlock was broken; retrying may succeed.
    #[error("{what}: busy (lock wait timeout or deadlock)")]
    Busy { what: &'static str },
    #[error("{what} failed")]
    Query { what: &'static str, #[source] source: sqlx::Error },
    /// The request is well-formed but would break a rule that needs the stored
    /// state to check (e.g. a chain cycle); nothing was written.
    #[error("{field}: {reason}")]
    Refused { field: String, reason: String },
    /// A leader write from a term that has ended: another scheduler leads now.
    #[error("leadership term {expected} has ended (current term is {current})")]
    Fenced { expected: u64, current: u64 },
    #[error("row of {what} is corrupt: {reason}")]
    Corrupt { what: &'static str, reason: String },
}

impl StoreError {
    /// Maps a sqlx error raised while doing `what`.
    pub fn query(what: &'static str, source: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &source
            && let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        {
            match mysql.number() {
                ER_DUP_ENTRY => return StoreError::Conflict { what },
                ER_LOCK_WAIT_TIMEOUT | ER_LOCK_DEADLOCK => return StoreError::Busy { what },
                _ => {}
            }
        }
        StoreError::Query { what, source }
    }

    /// Errors worth retrying the same transaction for.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy { .. })
            || matches!(self, StoreError::Query { source: sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut, .. })
    }

    /// Errors that mean MySQL is not reachable right now.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Connect(_) | StoreError::Query { source: sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed, .. }
        )
    }
}

/// Shorthand for mapping sqlx results at a named site.
pub(crate) trait Context<T> {
    fn at(self, what: &'static str) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn at(self, what: &'static str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::query(what, e))
    }
}

/// Runs `attempt` again when it failed with a deadlock or lock wait timeout, a few
/// times, as InnoDB asks of every transaction.
pub(crate) async fn retry_busy<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(err @ StoreError::Busy { .. }) if tries < 5 => {
                tries += 1;
                tracing::debug!(error = %err, tries, "transaction busy, retrying");
                tokio::time::sleep(std::time::Duration::from_millis(5 * tries)).await;
            }
            other => return other,
        }
    }
}
