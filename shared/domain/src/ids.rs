//! Identifiers: a readable prefix and a ULID body, so ids sort by creation time and
//! say what they name in logs, URLs and SQL alike.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An id string did not have the expected prefix or body.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {kind} id {value:?}: expected `{prefix}` followed by 26 ULID characters")]
pub struct InvalidId {
    pub kind: &'static str,
    pub prefix: &'static str,
    pub value: String,
}

/// ULIDs from one monotonic generator: within a millisecond the random part counts
/// up, so ids made by one process sort in the order they were made.
fn next_ulid() -> ulid::Ulid {
    static GENERATOR: std::sync::Mutex<Option<ulid::Generator>> = std::sync::Mutex::new(None);
    let mut generator = GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    generator.get_or_insert_with(ulid::Generator::new).generate().unwrap_or_else(|_| ulid::Ulid::new())
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new id whose body sorts after every id made earlier by this process.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, next_ulid()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(value: &str) -> Result<Self, InvalidId> {
                let body = value.strip_prefix($prefix);
                match body {
                    Some(body) if body.len() == 26 && ulid::Ulid::from_string(body).is_ok() => {
                        Ok(Self(value.to_owned()))
                    }
                    _ => Err(InvalidId { kind: $kind, prefix: $prefix, value: value.to_owned() }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, InvalidId> {
                value.parse()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A registered task; stable across definition versions.
    TaskId, "tsk_", "task");
prefixed_id!(
    /// One firing of a task; stable across its attempts.
    InstanceId, "ins_", "instance");
prefixed_id!(
    /// One event on `AX_EVENTS`; doubles as its `Nats-Msg-Id`.
    EventId, "evt_", "event");
prefixed_id!(
    /// Groups every event, log line and span of one instance.
    TraceId, "trc_", "trace");
prefixed_id!(
    /// One alert: a rule's condition from firing until it resolves.
    AlertId, "alt_", "alert");
prefixed_id!(
    /// One task health report (seed 6).
    ReportId, "rpt_", "report");

/// A worker process. Workers may choose their own id (e.g. the host name), so only
/// the character set is checked: `[A-Za-z0-9_.-]{1,128}`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkerId(String);

impl WorkerId {
    pub fn generate() -> Self {
        Self(format!("wkr_{}", ulid::Ulid::new()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for WorkerId {
    type Err = InvalidId;
    fn from_str(value: &str) -> Result<Self, InvalidId> {
        let ok = !value.is_empty()
            && value.len() <= 128
            && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidId { kind: "worker", prefix: "", value: value.to_owned() })
        }
    }
}

impl TryFrom<String> for WorkerId {
    type Error = InvalidId;
    fn try_from(value: String) -> Result<Self, InvalidId> {
        value.parse()
    }
}

impl From<WorkerId> for String {
    fn from(id: WorkerId) -> String {
        id.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_round_trip_and_sort_by_creation() {
        let first = InstanceId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = InstanceId::generate();
        assert!(first < second);
        assert_eq!(first.as_str().parse::<InstanceId>().unwrap(), first);
        assert!(first.as_str().starts_with("ins_"));
    }

    #[test]
    fn wrong_prefix_is_rejected_with_the_kind() {
        let task = TaskId::generate();
        let err = task.as_str().parse::<InstanceId>().unwrap_err();
        assert_eq!(err.kind, "instance");
        assert!("ins_short".parse::<InstanceId>().is_err());
    }

    #[test]
    fn worker_ids_accept_host_names_only() {
        assert!("host-1.example".parse::<WorkerId>().is_ok());
        assert!("bad id".parse::<WorkerId>().is_err());
        assert!("".parse::<WorkerId>().is_err());
    }
}
