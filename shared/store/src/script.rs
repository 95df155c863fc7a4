//! Several statements sent to MySQL as one text batch: one round trip for all.
//!
//! The hot path runs out of round trips before it runs out of statements (bench
//! README, step 19): each one wakes a server thread and a client task. sqlx cannot
//! pipeline prepared statements, but the connection allows several statements in
//! one `COM_QUERY`, so a transaction's tail (its inserts and the `COMMIT`) and its
//! head (`BEGIN` and the locking read) can each go in one packet.
//!
//! Text statements carry their values as literals, written here and only here: a
//! string without a quote, a backslash or a control character goes quoted as it
//! is (the same meaning whether or not the server runs with
//! `NO_BACKSLASH_ESCAPES`); any other string goes as `_utf8mb4 X'…'`, its bytes in
//! hex, so no value is ever read as SQL. Bytes go as `X'…'`, numbers in decimal,
//! times as `'YYYY-MM-DD HH:MM:SS.ffffff'` (UTC, as sqlx binds them).
//!
//! The server stops at the first statement that fails and runs none after it, so a
//! batch ending in `COMMIT` commits all of it or nothing; the error names the
//! statement. A connection left inside a transaction by a failed batch must not
//! be reused: hot connections are closed unless their user calls `done`.

use std::fmt::Write as _;

use ax_domain::Timestamp;
use futures::StreamExt;
use sqlx::mysql::MySqlRow;
use sqlx::{Either, MySqlConnection};

use crate::error::StoreError;

#[derive(Debug, Default)]
pub(crate) struct Script {
    sql: String,
    /// What each statement does, for errors: the n-th failed statement names itself.
    labels: Vec<&'static str>,
}

/// What a script's statements returned, in order: rows affected, and the rows of
/// those that select.
pub(crate) struct Results {
    pub affected: Vec<u64>,
    pub rows: Vec<Vec<MySqlRow>>,
}

impl Script {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Starts the next statement with `sql`; `label` says what it does.
    pub(crate) fn statement(&mut self, label: &'static str, sql: &str) -> &mut Self {
        if !self.labels.is_empty() {
            self.sql.push_str(";\n");
        }
        self.labels.push(label);
        self.sql.push_str(sql);
        self
    }

    /// SQL text of the current statement, written by this crate (never a value).
    pub(crate) fn sql(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    pub(crate) fn text(&mut self, value: &str) -> &mut Self {
        let plain = value.bytes().all(|b| b >= 0x20 && b != b'\'' && b != b'\\' && b != 0x7f);
        if plain {
            self.sql.push('\'');
            self.sql.push_str(value);
            self.sql.push('\'');
        } else {
            self.sql.push_str("_utf8mb4 ");
            self.hex(value.as_bytes());
        }
        self
    }

    pub(crate) fn opt_text(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(value) => self.text(value),
            None => self.sql("NULL"),
        }
    }

    pub(crate) fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.hex(value);
        self
    }

    pub(crate) fn uint(&mut self, value: u64) -> &mut Self {
        let _ = write!(self.sql, "{value}");
        self
    }

    pub(crate) fn opt_uint(&mut self, value: Option<u64>) -> &mut Self {
        match value {
            Some(value) => self.uint(value),
            None => self.sql("NULL"),
        }
    }

    pub(crate) fn time(&mut self, value: Timestamp) -> &mut Self {
        let _ = write!(self.sql, "'{}'", value.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f"));
        self
    }

    pub(crate) fn opt_time(&mut self, value: Option<Timestamp>) -> &mut Self {
        match value {
            Some(value) => self.time(value),
            None => self.sql("NULL"),
        }
    }

    /// `(a, b, c)` rows of a multi-row `INSERT … VALUES`, one call per row.
    pub(crate) fn values<T>(&mut self, rows: &[T], mut row: impl FnMut(&mut Values<'_>, &T)) -> &mut Self {
        for (i, item) in rows.iter().enumerate() {
            self.sql(if i == 0 { "(" } else { ", (" });
            let mut values = Values { script: self, first: true };
            row(&mut values, item);
            self.sql(")");
        }
        self
    }

    fn hex(&mut self, bytes: &[u8]) {
        const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
        self.sql.reserve(bytes.len() * 2 + 3);
        self.sql.push_str("X'");
        for &b in bytes {
            self.sql.push(DIGITS[usize::from(b >> 4)] as char);
            self.sql.push(DIGITS[usize::from(b & 0xf)] as char);
        }
        self.sql.push('\'');
    }

    /// Sends every statement in one round trip and reads every result.
    ///
    /// # Errors
    /// The first statement that failed, by its label (the ones after it did not run).
    pub(crate) async fn run(self, conn: &mut MySqlConnection) -> Result<Results, StoreError> {
        if self.labels.is_empty() {
            return Ok(Results { affected: Vec::new(), rows: Vec::new() });
        }
        let Script { sql, labels } = self;
        let mut results = Results { affected: Vec::with_capacity(labels.len()), rows: vec![Vec::new()] };
        {
            let mut stream = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_many(&mut *conn);
            while let Some(item) = stream.next().await {
                let what = labels.get(results.affected.len()).copied().unwrap_or("statement batch");
                match item.map_err(|e| StoreError::query(what, e))? {
                    Either::Left(done) => {
                        results.affected.push(done.rows_affected());
                        results.rows.push(Vec::new());
                    }
                    Either::Right(row) => results.rows.last_mut().expect("one list per statement").push(row),
                }
            }
        }
        results.rows.pop();
        if results.affected.len() != labels.len() {
            return Err(StoreError::Corrupt {
                what: "statement batch",
                reason: format!("{} statements sent, {} answered", labels.len(), results.affected.len()),
            });
        }
        Ok(results)
    }
}

/// One row of [`Script::values`]: each value comma-separated from the last.
pub(crate) struct Values<'a> {
    script: &'a mut Script,
    first: bool,
}

impl Values<'_> {
    fn next(&mut self) -> &mut Script {
        if !self.first {
            self.script.sql.push_str(", ");
        }
        self.first = false;
        self.script
    }

    pub(crate) fn text(&mut self, value: &str) -> &mut Self {
        self.next().text(value);
        self
    }

    pub(crate) fn opt_text(&mut self, value: Option<&str>) -> &mut Self {
        self.next().opt_text(value);
        self
    }

    pub(crate) fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.next().bytes(value);
        self
    }

    pub(crate) fn uint(&mut self, value: u64) -> &mut Self {
        self.next().uint(value);
        self
    }

    pub(crate) fn opt_uint(&mut self, value: Option<u64>) -> &mut Self {
        self.next().opt_uint(value);
        self
    }

    pub(crate) fn time(&mut self, value: Timestamp) -> &mut Self {
        self.next().time(value);
        self
    }

    pub(crate) fn opt_time(&mut self, value: Option<Timestamp>) -> &mut Self {
        self.next().opt_time(value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(value: &str) -> String {
        let mut script = Script::new();
        script.text(value);
        script.sql
    }

    #[test]
    fn plain_strings_are_quoted_and_anything_else_goes_in_hex() {
        assert_eq!(literal("wkr_01 é ✓"), "'wkr_01 é ✓'");
        assert_eq!(literal("it's"), "_utf8mb4 X'69742773'");
        assert_eq!(literal("a\\"), "_utf8mb4 X'615C'");
        assert_eq!(literal("a\nb"), "_utf8mb4 X'610A62'");
        assert_eq!(literal(""), "''");
    }

    #[test]
    fn statements_are_separated_and_values_listed() {
        let mut script = Script::new();
        script.statement("first", "INSERT INTO t (a, b, c) VALUES ").values(&[(1u64, "x"), (2, "y")], |row, (n, s)| {
            row.uint(*n).text(s).opt_time(None);
        });
        script.statement("second", "COMMIT");
        assert_eq!(script.sql, "INSERT INTO t (a, b, c) VALUES (1, 'x', NULL), (2, 'y', NULL);\nCOMMIT");
        assert_eq!(script.labels, ["first", "second"]);
        let mut time = Script::new();
        time.time(chrono::DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap());
        assert_eq!(time.sql, "'2023-11-14 22:13:20.123456'");
        let mut bytes = Script::new();
        bytes.bytes(&[0, 0xff, b'\'']);
        assert_eq!(bytes.sql, "X'00FF27'");
    }
}
