//! Task log lines (seed 5.5): written by the log sink in batches, read by instance
//! in order, deleted by day.

use std::fmt;
use std::str::FromStr;

use ax_domain::ids::InstanceId;
use ax_domain::log::{LogBatch, LogLevel};
use ax_domain::Timestamp;
use sqlx::{FromRow, QueryBuilder};

use crate::error::{retry_busy, Context, StoreError};
use crate::Store;

/// Rows per INSERT statement: large enough to amortise round trips, small enough
/// to stay below `max_allowed_packet` (16 MiB) with 32 KiB messages, and a power of
/// two so that `shapes::pieces` sends each full chunk as one statement.
const ROWS_PER_STATEMENT: usize = 256;

/// One stored line.
#[derive(Debug, Clone, PartialEq, serde::Serialize, FromRow)]
pub struct LogRow {
    #[serde(skip)]
    pub id: u64,
    pub instance_id: String,
    pub attempt: u32,
    pub worker_id: String,
    pub seq: u64,
    #[serde(rename = "task")]
    pub task_name: String,
    pub trace_id: String,
    pub level: String,
    pub stream: String,
    pub message: String,
    pub ts: Timestamp,
}

/// Where a page of a log ends: the reading-order key of its last line. Written as
/// `attempt.ts_micros.seq.id`, opaque to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCursor {
    pub attempt: u32,
    pub ts: Timestamp,
    pub seq: u64,
    pub id: u64,
}

impl LogCursor {
    /// Before every line.
    pub fn start() -> Self {
        Self { attempt: 0, ts: chrono::DateTime::UNIX_EPOCH, seq: 0, id: 0 }
    }

    pub fn after(row: &LogRow) -> Self {
        Self { attempt: row.attempt, ts: row.ts, seq: row.seq, id: row.id }
    }
}

impl fmt::Display for LogCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}.{}", self.attempt, self.ts.timestamp_micros(), self.seq, self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a log cursor (it is the `next` of an earlier page)")]
pub struct BadCursor;

impl FromStr for LogCursor {
    type Err = BadCursor;
    fn from_str(s: &str) -> Result<Self, BadCursor> {
        let mut parts = s.split('.');
        let mut next = || parts.next().ok_or(BadCursor);
        let attempt = next()?.parse().map_err(|_| BadCursor)?;
        let micros: i64 = next()?.parse().map_err(|_| BadCursor)?;
        let seq = next()?.parse().map_err(|_| BadCursor)?;
        let id = next()?.parse().map_err(|_| BadCursor)?;
        let ts = chrono::DateTime::from_timestamp_micros(micros).ok_or(BadCursor)?;
        Ok(Self { attempt, ts, seq, id })
    }
}

/// Which lines of one instance to read.
#[derive(Debug, Clone)]
pub struct LogQuery {
    pub instance_id: InstanceId,
    pub after: LogCursor,
    /// Only this attempt.
    pub attempt: Option<u32>,
    /// Only lines at this level or above.
    pub min_level: LogLevel,
    pub limit: u32,
}

impl Store {
    /// Stores every line of `batches` in one transaction; a line already stored (a
    /// redelivered batch) is skipped. Returns how many lines were new.
    ///
    /// # Errors
    /// MySQL failures; nothing is written then.
    pub async fn insert_log_batches(&self, batches: &[LogBatch], received_at: Timestamp) -> Result<u64, StoreError> {
        let rows: Vec<(&LogBatch, &ax_domain::log::LogLine)> = batches.iter().flat_map(|b| b.lines.iter().map(move |l| (b, l))).collect();
        if rows.is_empty() {
            return Ok(0);
        }
        retry_busy(|| async {
            let mut tx = self.pool.begin().await.at("begin insert logs")?;
            let mut inserted = 0;
            for chunk in rows.chunks(ROWS_PER_STATEMENT).flat_map(crate::shapes::pieces) {
                let mut insert = QueryBuilder::new(
                    "INSERT IGNORE INTO instance_logs (instance_id, attempt, worker_id, seq, task_name, trace_id, level, stream, message, ts, received_at) ",
                );
                insert.push_values(chunk, |mut row, (batch, line)| {
                    row.push_bind(batch.instance_id.as_str().to_owned())
                        .push_bind(batch.attempt)
                        .push_bind(batch.worker_id.as_str().to_owned())
                        .push_bind(line.seq)
                        .push_bind(batch.task.clone())
                        .push_bind(batch.trace_id.as_str().to_owned())
                        .push_bind(line.level.as_str())
                        .push_bind(line.stream.as_str())
                        .push_bind(line.message.clone())
                        .push_bind(ax_domain::truncate_micros(line.ts))
                        .push_bind(received_at);
                });
                inserted += insert.build().execute(&mut *tx).await.at("insert log lines")?.rows_affected();
            }
            tx.commit().await.at("commit log lines")?;
            Ok(inserted)
        })
        .await
    }

    /// One page of an instance's log in reading order: by attempt, then time, then
    /// sequence.
    pub async fn logs(&self, query: &LogQuery) -> Result<Vec<LogRow>, StoreError> {
        let levels: Vec<&str> = LogLevel::ALL.iter().filter(|l| **l >= query.min_level).map(|l| l.as_str()).collect();
        let attempt = query.attempt.unwrap_or(0);
        sqlx::query_as(include_str!("../queries/logs/page.sql"))
            .bind(query.instance_id.as_str())
            .bind(attempt)
            .bind(attempt)
            .bind(levels.join(","))
            .bind(query.after.attempt)
            .bind(query.after.ts)
            .bind(query.after.seq)
            .bind(query.after.id)
            .bind(query.limit.clamp(1, 10_000))
            .fetch_all(&self.pool)
            .await
            .at("read logs")
    }

    pub async fn log_line_count(&self, instance_id: &InstanceId) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar(include_str!("../queries/logs/count.sql"))
            .bind(instance_id.as_str())
            .fetch_one(&self.pool)
            .await
            .at("count log lines")?;
        Ok(count.max(0) as u64)
    }

    /// Deletes up to `limit` lines older than `cutoff`; returns how many went.
    pub async fn delete_logs_before(&self, cutoff: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(include_str!("../queries/logs/delete_before.sql"))
            .bind(cutoff)
            .bind(limit)
            .execute(&self.pool)
            .await
            .at("delete old log lines")?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let cursor = LogCursor { attempt: 2, ts: ax_domain::now(), seq: 17, id: 99 };
        assert_eq!(cursor.to_string().parse::<LogCursor>(), Ok(cursor));
        assert_eq!(LogCursor::start().to_string().parse::<LogCursor>(), Ok(LogCursor::start()));
        assert!("2.x.1.1".parse::<LogCursor>().is_err());
        assert!("2.1.1".parse::<LogCursor>().is_err());
    }
}
