//! Replays `AX_EVENTS` from a time with an ordered (ephemeral, flow-controlled)
//! consumer. It reads what the stream held when the replay began and stops, so a
//! replay always ends; filtering by task uses the subject, by instance the
//! `Ax-Instance` header, so neither decodes what it skips.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use ax_bus::Bus;
use ax_domain::event::{DecodeError, Event};
use ax_domain::Timestamp;
use futures::StreamExt;

use crate::AuditError;

/// How long the stream may stay silent while it still owes messages.
const STALL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub task: Option<String>,
    pub instance: Option<String>,
    /// Events committed at or after this time (from the start of the stream when absent).
    pub since: Option<Timestamp>,
    /// Events committed before this time.
    pub until: Option<Timestamp>,
}

/// One message of the stream, decoded or not.
#[derive(Debug)]
pub struct StreamEvent {
    pub stream_seq: u64,
    pub subject: String,
    pub event: Result<Event, DecodeError>,
}

/// Calls `each` for every event that passes `filter`, in stream order; returns
/// how many messages were read.
///
/// # Errors
/// The stream is missing or stops delivering.
pub async fn replay(bus: &Bus, filter: &ReplayFilter, mut each: impl FnMut(StreamEvent)) -> Result<u64, AuditError> {
    let stream_name = bus.names.stream(ax_bus::definitions::EVENTS);
    let err = |reason: String| AuditError::Stream { stream: stream_name.clone(), reason };
    let stream = bus.jetstream.get_stream(&stream_name).await.map_err(|e| err(e.to_string()))?;
    let deliver_policy = match filter.since {
        // Publishing comes after committing, so an event of time t is stored at or after t.
        Some(since) => DeliverPolicy::ByStartTime { start_time: since },
        None => DeliverPolicy::All,
    };
    let filter_subject = match &filter.task {
        Some(task) => bus.names.instance_events_of(Some(task)),
        None => bus.names.all_events(),
    };
    let consumer = stream
        .create_consumer(pull::OrderedConfig { deliver_policy, filter_subject, ..Default::default() })
        .await
        .map_err(|e| err(e.to_string()))?;
    let expected = consumer.cached_info().num_pending;
    if expected == 0 {
        return Ok(0);
    }
    let read_err = |reason: String| AuditError::Read { stream: stream_name.clone(), reason };
    let mut messages = consumer.messages().await.map_err(|e| read_err(e.to_string()))?;
    let mut delivered = 0;
    while delivered < expected {
        let message = match tokio::time::timeout(STALL, messages.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(read_err(e.to_string())),
            Ok(None) | Err(_) => return Err(AuditError::Stalled { stream: stream_name.clone(), delivered, expected }),
        };
        delivered += 1;
        let stream_seq = message.info().map(|i| i.stream_sequence).unwrap_or_default();
        if let Some(instance) = &filter.instance {
            let header = message.headers.as_ref().and_then(|h| h.get(ax_bus::headers::INSTANCE)).map(|v| v.as_str());
            if header != Some(instance.as_str()) {
                continue;
            }
        }
        let event = Event::decode(&message.payload);
        let outside = |e: &Event| filter.since.is_some_and(|since| e.time < since) || filter.until.is_some_and(|until| e.time >= until);
        if event.as_ref().is_ok_and(outside) {
            continue;
        }
        each(StreamEvent { stream_seq, subject: message.subject.to_string(), event });
    }
    Ok(delivered)
}
