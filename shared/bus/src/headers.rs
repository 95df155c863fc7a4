//! Headers on events: `Nats-Msg-Id` for JetStream's duplicate window, and the
//! `Ax-*` headers that let a subscriber filter without decoding the body.

use async_nats::HeaderMap;

pub const EVENT_ID: &str = "Ax-Event-Id";
pub const TASK: &str = "Ax-Task";
pub const INSTANCE: &str = "Ax-Instance";
pub const STATE: &str = "Ax-State";
pub const CONTENT_TYPE: &str = "Content-Type";
pub const CBOR: &str = "application/cbor";
/// On log batches: the attempt the lines belong to.
pub const ATTEMPT: &str = "Ax-Attempt";

/// The headers of one event.
pub fn event_headers(event_id: &str, task: &str, instance: Option<&str>, state: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, event_id);
    headers.insert(EVENT_ID, event_id);
    headers.insert(TASK, task);
    if let Some(instance) = instance {
        headers.insert(INSTANCE, instance);
    }
    if let Some(state) = state {
        headers.insert(STATE, state);
    }
    headers.insert(CONTENT_TYPE, CBOR);
    headers
}
