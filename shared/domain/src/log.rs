//! Task log lines: what workers publish on `ax.log.<task>.<instance>` (`AX_LOGS`) and
//! the log sink stores (seed 5.5).
//!
//! A message is one [`LogBatch`]: the fields every line of one attempt shares
//! (task, instance, attempt, worker, trace id) once, then the lines. Each line has a
//! sequence number and a timestamp that both grow strictly within one attempt on one
//! worker, so `(attempt, ts, seq)` orders an instance's whole log and
//! `(instance, attempt, worker, seq)` identifies a line (a redelivered batch is
//! stored once). Batches are CBOR (`Content-Type: application/cbor`, what the SDK
//! sends) or JSON (for workers written in other languages); `v` is the schema
//! version and the decoder accepts every version ever written, with a fixture per
//! version under `tests/fixtures/`.

use serde::{Deserialize, Serialize};

use crate::ids::{InstanceId, TraceId, WorkerId};
use crate::Timestamp;

pub const LOG_SCHEMA_VERSION: u16 = 1;
/// A longer message is cut to this many bytes (on a character boundary) and marked.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024;
/// At most this many lines travel in one batch.
pub const MAX_BATCH_LINES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub const ALL: [LogLevel; 5] = [LogLevel::Trace, LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str().eq_ignore_ascii_case(value))
    }
}

/// Where a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// The handler's `ctx.log`.
    Handler,
    /// A `shell` command's standard output.
    Stdout,
    /// A `shell` command's standard error.
    Stderr,
    /// The worker SDK itself: attempt started, finished, lines dropped.
    Worker,
}

impl LogStream {
    pub const ALL: [LogStream; 4] = [LogStream::Handler, LogStream::Stdout, LogStream::Stderr, LogStream::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Handler => "handler",
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Worker => "worker",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(value))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// 1, 2, 3 … within one attempt on one worker.
    pub seq: u64,
    /// Strictly increasing within one attempt on one worker. On the wire:
    /// microseconds since the Unix epoch (an RFC 3339 string is accepted too), as
    /// formatting a date per line would cost a shipper more than the rest of it.
    #[serde(with = "micros")]
    pub ts: Timestamp,
    pub level: LogLevel,
    pub stream: LogStream,
    pub message: String,
}

/// The lines of one attempt of one instance on one worker, as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogBatch {
    pub v: u16,
    pub task: String,
    pub instance_id: InstanceId,
    pub attempt: u32,
    pub worker_id: WorkerId,
    pub trace_id: TraceId,
    pub lines: Vec<LogLine>,
}

#[derive(Debug, thiserror::Error)]
pub enum LogDecodeError {
    #[error("log batch is not valid CBOR: {0}")]
    Cbor(String),
    #[error("log batch is not valid JSON: {0}")]
    Json(String),
    #[error("content type {0:?} is neither application/cbor nor application/json")]
    ContentType(String),
    #[error("log batch schema version {0} is newer than this build understands")]
    UnknownVersion(u16),
    #[error("log batch field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl LogBatch {
    /// CBOR, byte for byte what `ciborium` writes for this struct (a test holds
    /// the two together), written by hand because a worker logging in a tight loop
    /// spends most of its shipping time here: ten times faster than going
    /// through serde.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(160 + self.lines.iter().map(|l| l.message.len() + 48).sum::<usize>());
        cbor::head(&mut out, cbor::MAP, 7);
        cbor::text(&mut out, "v");
        cbor::head(&mut out, cbor::UINT, u64::from(self.v));
        cbor::text(&mut out, "task");
        cbor::text(&mut out, &self.task);
        cbor::text(&mut out, "instance_id");
        cbor::text(&mut out, self.instance_id.as_str());
        cbor::text(&mut out, "attempt");
        cbor::head(&mut out, cbor::UINT, u64::from(self.attempt));
        cbor::text(&mut out, "worker_id");
        cbor::text(&mut out, self.worker_id.as_str());
        cbor::text(&mut out, "trace_id");
        cbor::text(&mut out, self.trace_id.as_str());
        cbor::text(&mut out, "lines");
        cbor::head(&mut out, cbor::ARRAY, self.lines.len() as u64);
        for line in &self.lines {
            cbor::head(&mut out, cbor::MAP, 5);
            cbor::text(&mut out, "seq");
            cbor::head(&mut out, cbor::UINT, line.seq);
            cbor::text(&mut out, "ts");
            cbor::int(&mut out, line.ts.timestamp_micros());
            cbor::text(&mut out, "level");
            cbor::text(&mut out, line.level.as_str());
            cbor::text(&mut out, "stream");
            cbor::text(&mut out, line.stream.as_str());
            cbor::text(&mut out, "message");
            cbor::text(&mut out, &line.message);
        }
        out
    }

    /// Decodes CBOR (`application/cbor`, or no content type) or JSON
    /// (`application/json`) and checks what a sink relies on.
    ///
    /// # Errors
    /// Undecodable bytes, a newer version, or a batch that breaks the rules above.
    pub fn decode(bytes: &[u8], content_type: Option<&str>) -> Result<Self, LogDecodeError> {
        let media = content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        let batch: LogBatch = match media.as_deref() {
            None | Some("application/cbor") => ciborium::from_reader(bytes).map_err(|e| LogDecodeError::Cbor(e.to_string()))?,
            Some("application/json") => serde_json::from_slice(bytes).map_err(|e| LogDecodeError::Json(e.to_string()))?,
            Some(other) => return Err(LogDecodeError::ContentType(other.to_owned())),
        };
        if batch.v > LOG_SCHEMA_VERSION {
            return Err(LogDecodeError::UnknownVersion(batch.v));
        }
        batch.validate()?;
        Ok(batch)
    }

    fn validate(&self) -> Result<(), LogDecodeError> {
        let invalid = |field, reason: &str| Err(LogDecodeError::Invalid { field, reason: reason.to_owned() });
        if !crate::task::is_valid_task_name(&self.task) {
            return invalid("task", "must match [a-z0-9_-]{1,64}");
        }
        if self.attempt == 0 {
            return invalid("attempt", "starts at 1");
        }
        if self.lines.is_empty() {
            return invalid("lines", "a batch carries at least one line");
        }
        if self.lines.len() > MAX_BATCH_LINES {
            return invalid("lines", &format!("at most {MAX_BATCH_LINES} lines per batch"));
        }
        if self.lines.iter().any(|l| l.seq == 0) {
            return invalid("lines.seq", "starts at 1");
        }
        if self.lines.iter().any(|l| l.message.len() > MAX_MESSAGE_BYTES + 64) {
            return invalid("lines.message", &format!("at most {MAX_MESSAGE_BYTES} bytes"));
        }
        Ok(())
    }
}

/// The few CBOR items a log batch is made of (RFC 8949, shortest form).
mod cbor {
    pub const UINT: u8 = 0;
    const NINT: u8 = 1;
    const TEXT: u8 = 3;
    pub const ARRAY: u8 = 4;
    pub const MAP: u8 = 5;

    pub fn head(out: &mut Vec<u8>, major: u8, n: u64) {
        let major = major << 5;
        match n {
            0..=23 => out.push(major | n as u8),
            24..=0xff => out.extend_from_slice(&[major | 24, n as u8]),
            0x100..=0xffff => {
                out.push(major | 25);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(major | 26);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(major | 27);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    }

    pub fn int(out: &mut Vec<u8>, n: i64) {
        if n >= 0 { head(out, UINT, n as u64) } else { head(out, NINT, !(n as u64)) }
    }

    pub fn text(out: &mut Vec<u8>, s: &str) {
        head(out, TEXT, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
}

/// Timestamps as integer microseconds since the epoch; strings in RFC 3339 are read too.
mod micros {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    use crate::Timestamp;

    pub fn serialize<S: Serializer>(ts: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(ts.timestamp_micros())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        struct Micros;
        impl Visitor<'_> for Micros {
            type Value = Timestamp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("microseconds since the Unix epoch, or an RFC 3339 time")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Timestamp, E> {
                chrono::DateTime::from_timestamp_micros(v).ok_or_else(|| E::custom("time out of range"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Timestamp, E> {
                self.visit_i64(i64::try_from(v).map_err(|_| E::custom("time out of range"))?)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Timestamp, E> {
                chrono::DateTime::parse_from_rfc3339(v).map(|t| crate::truncate_micros(t.with_timezone(&chrono::Utc))).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Micros)
    }
}

/// Cuts a message that is too long, on a character boundary, and says so.
pub fn clip_message(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = message.len() - end;
    message.truncate(end);
    message.push_str(&format!(" …[{cut} bytes cut]"));
    message
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn sample() -> LogBatch {
        let ts = chrono::Utc.with_ymd_and_hms(2026, 12, 2, 13, 0, 0).unwrap();
        LogBatch {
            v: 1,
            task: "order_sync".into(),
            instance_id: "ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF".parse().unwrap(),
            attempt: 2,
            worker_id: "w1".parse().unwrap(),
            trace_id: "trc_01JDQ6Z8X5C4V9N2M7K3H1G0FG".parse().unwrap(),
            lines: vec![
                LogLine { seq: 1, ts, level: LogLevel::Info, stream: LogStream::Handler, message: "syncing 42 orders".into() },
                LogLine {
                    seq: 2,
                    ts: ts + chrono::TimeDelta::microseconds(1),
                    level: LogLevel::Warn,
                    stream: LogStream::Stderr,
                    message: "retrying order 7".into(),
                },
            ],
        }
    }

    #[test]
    fn batches_round_trip_through_cbor_and_json() {
        let batch = sample();
        assert_eq!(LogBatch::decode(&batch.encode(), Some("application/cbor")).unwrap(), batch);
        assert_eq!(LogBatch::decode(&batch.encode(), None).unwrap(), batch);
        let json = serde_json::to_vec(&batch).unwrap();
        assert_eq!(LogBatch::decode(&json, Some("application/json; charset=utf-8")).unwrap(), batch);
    }

    /// Written once, never regenerated: proves this build reads what version 1 wrote.
    #[test]
    fn the_version_1_fixture_still_decodes() {
        let bytes = include_bytes!("../tests/fixtures/log_batch_v1.cbor");
        assert_eq!(LogBatch::decode(bytes, None).unwrap(), sample());
    }

    #[test]
    fn the_hand_written_encoder_writes_what_serde_would() {
        let mut batch = sample();
        let long = "ü".repeat(40_000);
        for (i, message) in ["", "x", &"y".repeat(23), &"z".repeat(24), &"w".repeat(255), &"v".repeat(256), &"u".repeat(70_000), &long].into_iter().enumerate() {
            batch.lines.push(LogLine {
                seq: [0, 23, 24, 255, 256, 65_535, 65_536, u64::MAX][i],
                ts: chrono::DateTime::from_timestamp_micros([-1, 0, 1_796_222_022_123_456, -62_000_000_000_000_000][i % 4]).unwrap(),
                level: LogLevel::ALL[i % 5],
                stream: LogStream::ALL[i % 4],
                message: message.to_owned(),
            });
        }
        batch.attempt = u32::MAX;
        let mut serde_bytes = Vec::new();
        ciborium::into_writer(&batch, &mut serde_bytes).unwrap();
        assert_eq!(batch.encode(), serde_bytes);
    }

    #[test]
    fn json_producers_may_write_times_either_way() {
        let id = "ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF";
        let json = |ts: &str| {
            format!(
                r#"{{"v":1,"task":"t","instance_id":"{id}","attempt":1,"worker_id":"w","trace_id":"trc_01JDQ6Z8X5C4V9N2M7K3H1G0FG",
                   "lines":[{{"seq":1,"ts":{ts},"level":"info","stream":"handler","message":"m"}}]}}"#
            )
        };
        let a = LogBatch::decode(json("1796222022000001").as_bytes(), Some("application/json")).unwrap();
        let b = LogBatch::decode(json(r#""2026-12-02T14:33:42.000001Z""#).as_bytes(), Some("application/json")).unwrap();
        assert_eq!(a.lines[0].ts.timestamp_micros(), 1_796_222_022_000_001);
        assert_eq!(b.lines[0].ts.timestamp_micros(), 1_796_222_022_000_001);
    }

    #[test]
    fn bad_batches_name_the_field() {
        let mut batch = sample();
        batch.lines.clear();
        let err = LogBatch::decode(&batch.encode(), None).unwrap_err();
        assert!(matches!(err, LogDecodeError::Invalid { field: "lines", .. }), "{err}");
        let mut batch = sample();
        batch.task = "Bad Task".into();
        assert!(matches!(LogBatch::decode(&batch.encode(), None), Err(LogDecodeError::Invalid { field: "task", .. })));
        assert!(matches!(LogBatch::decode(b"garbage", None), Err(LogDecodeError::Cbor(_))));
        assert!(matches!(LogBatch::decode(b"{}", Some("text/plain")), Err(LogDecodeError::ContentType(_))));
        let mut batch = sample();
        batch.v = 9;
        assert!(matches!(LogBatch::decode(&batch.encode(), None), Err(LogDecodeError::UnknownVersion(9))));
    }

    #[test]
    fn long_messages_are_clipped_on_a_character_boundary() {
        let message = "é".repeat(MAX_MESSAGE_BYTES);
        let clipped = clip_message(message);
        assert!(clipped.len() < MAX_MESSAGE_BYTES + 32);
        assert!(clipped.ends_with("bytes cut]"));
        assert_eq!(clip_message("short".into()), "short");
    }
}
