//! The event envelope published on `AX_EVENTS`.
//!
//! An event is CBOR: `{id, v, kind, time, body}`. `kind` is a stable number (a
//! retired number is never reused) and decides how `body` decodes; `v` is the body's
//! schema version. The decoder accepts every version ever written; a fixture per
//! version is checked in under `tests/fixtures/`.

use serde::{Deserialize, Serialize};

use crate::health::HealthFlag;
use crate::ids::{EventId, InstanceId, ReportId, TraceId, WorkerId};
use crate::shard::ShardOf;
use crate::state::StateKind;
use crate::task::TriggerKind;
use crate::Timestamp;

pub const SCHEMA_VERSION: u16 = 1;

/// Stable numeric kinds, past tense.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    InstanceTransitioned = 1,
    TaskChanged = 2,
    HealthReported = 3,
}

impl EventKind {
    pub fn from_number(n: u16) -> Option<Self> {
        match n {
            1 => Some(EventKind::InstanceTransitioned),
            2 => Some(EventKind::TaskChanged),
            3 => Some(EventKind::HealthReported),
            _ => None,
        }
    }
}

/// One transition of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceTransitioned {
    pub task: String,
    pub task_version: u32,
    pub instance_id: InstanceId,
    pub attempt: u32,
    /// 1 for the event that created the instance, then +1 per transition, no gaps.
    pub seq: u32,
    /// `None` for the event that created the instance.
    pub from: Option<StateKind>,
    pub to: StateKind,
    /// `scheduler`, `worker:<id>`, `api:<who>`, `chain`, …
    pub operator: String,
    pub reason: String,
    pub worker_id: Option<WorkerId>,
    pub trigger_type: TriggerKind,
    pub trigger_id: String,
    pub trace_id: TraceId,
    /// Set on the instances of a sharded or broadcast firing (not on the firing
    /// itself). Absent from events written before sharding, which decode as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardOf>,
}

/// A task definition's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    Registered,
    Updated,
    Enabled,
    Disabled,
    Deleted,
}

impl TaskAction {
    pub fn token(self) -> &'static str {
        match self {
            TaskAction::Registered => "registered",
            TaskAction::Updated => "updated",
            TaskAction::Enabled => "enabled",
            TaskAction::Disabled => "disabled",
            TaskAction::Deleted => "deleted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskChanged {
    pub task: String,
    pub task_version: u32,
    pub action: TaskAction,
    pub operator: String,
}

/// The monthly task health report was made (seed 6); the whole report is served at
/// `GET /api/v1/reports/health/{report_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReported {
    pub report_id: ReportId,
    pub since: Timestamp,
    pub until: Timestamp,
    pub tasks_total: u32,
    pub tasks_flagged: u32,
    pub flagged: Vec<FlaggedTask>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlaggedTask {
    pub task: String,
    pub owner: String,
    pub flags: Vec<HealthFlag>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    InstanceTransitioned(InstanceTransitioned),
    TaskChanged(TaskChanged),
    HealthReported(HealthReported),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub time: Timestamp,
    pub body: EventBody,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    id: EventId,
    v: u16,
    kind: u16,
    time: Timestamp,
    body: ciborium::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("event is not valid CBOR")]
    Cbor(#[source] ciborium::de::Error<std::io::Error>),
    #[error("event kind {0} is unknown")]
    UnknownKind(u16),
    #[error("event schema version {0} is newer than this build understands")]
    UnknownVersion(u16),
    #[error("event body does not match kind {kind}: {reason}")]
    Body { kind: u16, reason: String },
}

impl Event {
    pub fn kind(&self) -> EventKind {
        match self.body {
            EventBody::InstanceTransitioned(_) => EventKind::InstanceTransitioned,
            EventBody::TaskChanged(_) => EventKind::TaskChanged,
            EventBody::HealthReported(_) => EventKind::HealthReported,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let body = match &self.body {
            EventBody::InstanceTransitioned(b) => ciborium::Value::serialized(b),
            EventBody::TaskChanged(b) => ciborium::Value::serialized(b),
            EventBody::HealthReported(b) => ciborium::Value::serialized(b),
        }
        .expect("event bodies always serialize");
        let wire = Wire { id: self.id.clone(), v: SCHEMA_VERSION, kind: self.kind() as u16, time: self.time, body };
        let mut out = Vec::with_capacity(256);
        ciborium::into_writer(&wire, &mut out).expect("writing to a Vec cannot fail");
        out
    }

    /// # Errors
    /// Bytes that are not an AX event of a known kind and version.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let wire: Wire = ciborium::from_reader(bytes).map_err(DecodeError::Cbor)?;
        if wire.v > SCHEMA_VERSION {
            return Err(DecodeError::UnknownVersion(wire.v));
        }
        let kind = EventKind::from_number(wire.kind).ok_or(DecodeError::UnknownKind(wire.kind))?;
        let body_err = |err: ciborium::value::Error| DecodeError::Body { kind: wire.kind, reason: err.to_string() };
        let body = match kind {
            EventKind::InstanceTransitioned => EventBody::InstanceTransitioned(wire.body.deserialized().map_err(body_err)?),
            EventKind::TaskChanged => EventBody::TaskChanged(wire.body.deserialized().map_err(body_err)?),
            EventKind::HealthReported => EventBody::HealthReported(wire.body.deserialized().map_err(body_err)?),
        };
        Ok(Self { id: wire.id, time: wire.time, body })
    }

    /// A JSON rendering for people and line-oriented tools (`ax events tail`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::json!({
            "id": self.id,
            "v": SCHEMA_VERSION,
            "kind": self.kind() as u16,
            "time": self.time,
        });
        value["body"] = match &self.body {
            EventBody::InstanceTransitioned(b) => serde_json::to_value(b),
            EventBody::TaskChanged(b) => serde_json::to_value(b),
            EventBody::HealthReported(b) => serde_json::to_value(b),
        }
        .expect("event bodies always serialize");
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Event {
        use chrono::TimeZone;
        Event {
            id: "evt_01JDQ6Z8X5C4V9N2M7K3H1G0FE".parse().unwrap(),
            time: chrono::Utc.with_ymd_and_hms(2026, 12, 2, 13, 0, 0).unwrap(),
            body: EventBody::InstanceTransitioned(InstanceTransitioned {
                task: "order_sync".into(),
                task_version: 3,
                instance_id: "ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF".parse().unwrap(),
                attempt: 1,
                seq: 4,
                from: Some(StateKind::Running),
                to: StateKind::Succeeded,
                operator: "worker:w1".into(),
                reason: String::new(),
                worker_id: Some("w1".parse().unwrap()),
                trigger_type: TriggerKind::Event,
                trigger_id: "order-42".into(),
                trace_id: "trc_01JDQ6Z8X5C4V9N2M7K3H1G0FG".parse().unwrap(),
                shard: None,
            }),
        }
    }

    #[test]
    fn events_round_trip_through_cbor() {
        let event = sample();
        assert_eq!(Event::decode(&event.encode()).unwrap(), event);
    }

    /// The version-1 fixture was written once and is never regenerated: it proves
    /// this build still reads what version 1 wrote.
    #[test]
    fn a_shard_event_round_trips_and_names_its_firing() {
        let mut event = sample();
        let EventBody::InstanceTransitioned(body) = &mut event.body else { unreachable!() };
        body.shard = Some(ShardOf { parent_id: "ins_01JDQ6Z8X5C4V9N2M7K3H1G0FA".parse().unwrap(), index: 2, total: 4 });
        assert_eq!(Event::decode(&event.encode()).unwrap(), event);
    }

    #[test]
    fn the_version_1_fixture_still_decodes() {
        let bytes = include_bytes!("../tests/fixtures/instance_transitioned_v1.cbor");
        assert_eq!(Event::decode(bytes).unwrap(), sample());
    }

    fn health_sample() -> Event {
        use chrono::TimeZone;
        Event {
            id: "evt_01JDQ6Z8X5C4V9N2M7K3H1G0FH".parse().unwrap(),
            time: chrono::Utc.with_ymd_and_hms(2027, 1, 1, 9, 0, 0).unwrap(),
            body: EventBody::HealthReported(HealthReported {
                report_id: "rpt_01JDQ6Z8X5C4V9N2M7K3H1G0FJ".parse().unwrap(),
                since: chrono::Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap(),
                until: chrono::Utc.with_ymd_and_hms(2027, 1, 1, 9, 0, 0).unwrap(),
                tasks_total: 12,
                tasks_flagged: 1,
                flagged: vec![FlaggedTask {
                    task: "order_sync".into(),
                    owner: "data_team".into(),
                    flags: vec![HealthFlag::FailingInARow, HealthFlag::SlowRuns],
                }],
            }),
        }
    }

    #[test]
    fn the_health_reported_version_1_fixture_still_decodes() {
        let bytes = include_bytes!("../tests/fixtures/health_reported_v1.cbor");
        assert_eq!(Event::decode(bytes).unwrap(), health_sample());
    }

    #[test]
    fn unknown_kinds_and_garbage_are_errors() {
        assert!(matches!(Event::decode(b"not cbor"), Err(DecodeError::Cbor(_))));
        let wire = Wire { id: EventId::generate(), v: 1, kind: 99, time: crate::now(), body: ciborium::Value::Null };
        let mut bytes = Vec::new();
        ciborium::into_writer(&wire, &mut bytes).unwrap();
        assert!(matches!(Event::decode(&bytes), Err(DecodeError::UnknownKind(99))));
    }
}
