//! The durable consumer of `AX_LOGS`.
//!
//! What is ready is taken as one pull and classified message by message: a batch
//! that decodes, passes its checks and matches its subject is good; anything else
//! can never succeed and is terminated (acknowledged, logged, counted) so it is
//! not redelivered forever. The good batches of a pull are written in one
//! transaction, then acknowledged; a failed write is negatively acknowledged with
//! a delay and comes back. A redelivered batch is harmless: lines are unique by
//! (instance, attempt, worker, seq).

use std::time::Duration;

use async_nats::jetstream::message::{AckKind, Message};
use ax_domain::log::LogBatch;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Deps};

const PULL: usize = 256;
const RETRY_DELAY: Duration = Duration::from_secs(2);

pub async fn run(deps: Deps, consumer: async_nats::jetstream::consumer::PullConsumer, shutdown: CancellationToken) -> anyhow::Result<()> {
    ax_bus::consume::consume_batches(consumer, PULL, "log-sink", shutdown, |messages| handle(&deps, messages)).await;
    Ok(())
}

/// Why a message can never be stored.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Subject,
    Malformed(String),
    Mismatch,
}

impl Refusal {
    fn label(&self) -> &'static str {
        match self {
            Refusal::Subject => "subject",
            Refusal::Malformed(_) => "malformed",
            Refusal::Mismatch => "mismatch",
        }
    }
}

/// Decodes one message and checks it against its subject.
///
/// # Errors
/// The reason it can never be stored.
pub fn classify(names: &ax_domain::subjects::Names, subject: &str, content_type: Option<&str>, payload: &[u8]) -> Result<LogBatch, Refusal> {
    let (task, instance) = names.task_and_instance_of_log(subject).ok_or(Refusal::Subject)?;
    let batch = LogBatch::decode(payload, content_type).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if batch.task != task || batch.instance_id.as_str() != instance {
        return Err(Refusal::Mismatch);
    }
    Ok(batch)
}

async fn handle(deps: &Deps, messages: Vec<Message>) {
    let mut good = Vec::with_capacity(messages.len());
    let mut batches = Vec::with_capacity(messages.len());
    for message in messages {
        let content_type = message.headers.as_ref().and_then(|h| h.get(ax_bus::headers::CONTENT_TYPE)).map(|v| v.as_str().to_owned());
        match classify(&deps.bus.names, message.subject.as_str(), content_type.as_deref(), &message.payload) {
            Ok(batch) => {
                batches.push(batch);
                good.push(message);
            }
            Err(refusal) => {
                ::metrics::counter!(metrics::REFUSED, "reason" => refusal.label()).increment(1);
                tracing::warn!(subject = %message.subject, reason = refusal.label(), detail = ?refusal, "log message refused and acknowledged");
                if let Err(err) = message.ack_with(AckKind::Term).await {
                    tracing::warn!(error = %err, "terminating a refused log message failed; it may be seen again");
                }
            }
        }
    }
    if batches.is_empty() {
        return;
    }
    let lines: u64 = batches.iter().map(|b| b.lines.len() as u64).sum();
    let started = std::time::Instant::now();
    let now = ax_domain::now();
    match deps.store.insert_log_batches(&batches, now).await {
        Ok(stored) => {
            ::metrics::histogram!(metrics::WRITE_SECONDS).record(started.elapsed().as_secs_f64());
            ::metrics::counter!(metrics::BATCHES).increment(batches.len() as u64);
            ::metrics::counter!(metrics::LINES).increment(stored);
            ::metrics::counter!(metrics::DUPLICATE_LINES).increment(lines.saturating_sub(stored));
            for batch in &batches {
                if let Some(first) = batch.lines.first() {
                    ::metrics::histogram!(metrics::DELAY_SECONDS).record((now - first.ts).as_seconds_f64().max(0.0));
                }
            }
            for message in good {
                if let Err(err) = message.ack().await {
                    tracing::warn!(error = %err, "ack of stored log lines failed; their redelivery will be skipped as duplicates");
                }
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, batches = batches.len(), "storing log lines failed; they will be redelivered");
            ::metrics::counter!(metrics::FAILURES, "loop" => "write").increment(1);
            for message in good {
                let _ = message.ack_with(AckKind::Nak(Some(RETRY_DELAY))).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ax_domain::subjects::Names;

    use super::*;

    fn batch() -> LogBatch {
        LogBatch {
            v: 1,
            task: "t".into(),
            instance_id: ax_domain::ids::InstanceId::generate(),
            attempt: 1,
            worker_id: "w".parse().unwrap(),
            trace_id: ax_domain::ids::TraceId::generate(),
            lines: vec![ax_domain::log::LogLine {
                seq: 1,
                ts: ax_domain::now(),
                level: ax_domain::log::LogLevel::Info,
                stream: ax_domain::log::LogStream::Handler,
                message: "hello".into(),
            }],
        }
    }

    #[test]
    fn good_batches_pass_and_the_rest_is_refused_with_a_reason() {
        let names = Names::new("t1");
        let b = batch();
        let subject = names.log("t", b.instance_id.as_str());
        assert_eq!(classify(&names, &subject, Some("application/cbor"), &b.encode()).unwrap(), b);
        assert_eq!(classify(&names, "t1.log.t", None, &b.encode()).unwrap_err(), Refusal::Subject);
        assert!(matches!(classify(&names, &subject, None, b"junk").unwrap_err(), Refusal::Malformed(_)));
        let other = names.log("t", ax_domain::ids::InstanceId::generate().as_str());
        assert_eq!(classify(&names, &other, None, &b.encode()).unwrap_err(), Refusal::Mismatch);
    }
}
