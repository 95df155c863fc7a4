//! Trigger requests: what upstream systems, the api and the chain service send to
//! fire a task (`ax.trigger.<task>` on NATS, or `POST /api/v1/tasks/{name}/trigger`).

use serde::{Deserialize, Serialize};

use crate::task::{FieldError, Priority};
use crate::Timestamp;

/// At most this many bytes of params travel with an instance.
pub const MAX_PARAMS_BYTES: usize = 64 * 1024;
const MAX_DELAY_SEC: u64 = 366 * 24 * 3600;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Makes the request idempotent: one trigger id, at most one instance. On NATS it
    /// defaults to the message's `Nats-Msg-Id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    #[serde(default = "empty_object")]
    pub params: serde_json::Value,
    /// Must equal the task's `schema_version` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// Run this many seconds from now instead of at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_sec: Option<u64>,
    /// Run at this time instead of at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_at: Option<Timestamp>,
}

impl Default for TriggerRequest {
    fn default() -> Self {
        Self {
            trigger_id: None,
            params: empty_object(),
            payload_version: None,
            priority: None,
            delay_sec: None,
            execute_at: None,
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// Trigger ids are opaque but bounded: printable ASCII without spaces, 1 to 128 bytes.
pub fn is_valid_trigger_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

impl TriggerRequest {
    /// Parses JSON (`application/json`, or no content type) or CBOR (`application/cbor`).
    ///
    /// # Errors
    /// The first problem, naming the field.
    pub fn decode(body: &[u8], content_type: Option<&str>) -> Result<Self, FieldError> {
        let is_cbor = content_type.is_some_and(|ct| ct.trim().to_ascii_lowercase().starts_with("application/cbor"));
        let request: TriggerRequest = if is_cbor {
            ciborium::from_reader(body).map_err(|err| FieldError::new("", format!("body is not valid CBOR: {err}")))?
        } else if body.iter().all(u8::is_ascii_whitespace) {
            TriggerRequest::default()
        } else {
            let mut de = serde_json::Deserializer::from_slice(body);
            serde_path_to_error::deserialize(&mut de).map_err(FieldError::from_serde)?
        };
        request.validate()?;
        Ok(request)
    }

    /// # Errors
    /// The first violated rule, naming its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(id) = &self.trigger_id
            && !is_valid_trigger_id(id)
        {
            return Err(FieldError::new("trigger_id", "must be 1 to 128 printable ASCII characters without spaces"));
        }
        if !self.params.is_object() {
            return Err(FieldError::new("params", "must be a JSON object"));
        }
        if serde_json::to_vec(&self.params).map(|v| v.len()).unwrap_or(usize::MAX) > MAX_PARAMS_BYTES {
            return Err(FieldError::new("params", format!("must be at most {MAX_PARAMS_BYTES} bytes")));
        }
        if self.payload_version == Some(0) {
            return Err(FieldError::new("payload_version", "must be at least 1"));
        }
        if let Some(delay) = self.delay_sec
            && delay > MAX_DELAY_SEC
        {
            return Err(FieldError::new("delay_sec", format!("must be at most {MAX_DELAY_SEC}")));
        }
        if self.delay_sec.is_some() && self.execute_at.is_some() {
            return Err(FieldError::new("execute_at", "give either delay_sec or execute_at, not both"));
        }
        Ok(())
    }

    /// When the instance becomes due: `execute_at`, now + `delay_sec`, or
    /// now + `default_delay_sec` (a delay trigger in the definition).
    pub fn due_at(&self, now: Timestamp, default_delay_sec: Option<u64>) -> Timestamp {
        if let Some(at) = self.execute_at {
            return crate::truncate_micros(at.max(now));
        }
        match self.delay_sec.or(default_delay_sec) {
            Some(secs) => now + chrono::TimeDelta::seconds(secs as i64),
            None => now,
        }
    }
}

impl From<ciborium::de::Error<std::io::Error>> for FieldError {
    fn from(err: ciborium::de::Error<std::io::Error>) -> Self {
        FieldError::new("", format!("body is not valid CBOR: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_cbor_decode_alike() {
        let request = TriggerRequest {
            trigger_id: Some("order-42".into()),
            params: serde_json::json!({"order": 42}),
            payload_version: Some(2),
            priority: Some(Priority::Urgent),
            ..Default::default()
        };
        let json = serde_json::to_vec(&request).unwrap();
        let mut cbor = Vec::new();
        ciborium::into_writer(&request, &mut cbor).unwrap();
        assert_eq!(TriggerRequest::decode(&json, Some("application/json")).unwrap(), request);
        assert_eq!(TriggerRequest::decode(&cbor, Some("application/cbor")).unwrap(), request);
    }

    #[test]
    fn an_empty_body_is_a_trigger_with_no_params() {
        let request = TriggerRequest::decode(b"", None).unwrap();
        assert_eq!(request.params, serde_json::json!({}));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases = [
            (r#"{"params": [1]}"#, "params"),
            (r#"{"trigger_id": "has space"}"#, "trigger_id"),
            (r#"{"priority": "asap"}"#, "priority"),
            (r#"{"payload_version": 0}"#, "payload_version"),
            (r#"{"delay_sec": 5, "execute_at": "2030-01-01T00:00:00Z"}"#, "execute_at"),
            (r#"{"surprise": 1}"#, "surprise"),
        ];
        for (body, field) in cases {
            let err = TriggerRequest::decode(body.as_bytes(), None).unwrap_err();
            assert_eq!(err.field, field, "{body}: {err}");
        }
        assert!(TriggerRequest::decode(b"{not json", None).is_err());
        assert!(TriggerRequest::decode(b"\xff\xff", Some("application/cbor")).is_err());
    }
}
