//! Workers' lease renewals and progress reports. Any replica answers (queue group).
//!
//! A renewal names the attempts the worker runs; MySQL extends those it still
//! holds and the answer lists the ones it does not, which the worker stops. A
//! worker that gets no answer for a whole lease stops everything itself, so a
//! partitioned worker never runs on as a zombie while its work is retried elsewhere.

use ax_domain::protocol::{LeaseRenewal, LeaseRenewed, Progress};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Shared};

const QUEUE_GROUP: &str = "ax-scheduler";

pub(crate) async fn subscribe(shared: &Shared) -> Result<(async_nats::Subscriber, async_nats::Subscriber), async_nats::SubscribeError> {
    let client = &shared.deps.bus.client;
    let renewals = client.queue_subscribe(shared.deps.bus.names.lease_renewal(), QUEUE_GROUP.to_owned()).await?;
    let progress = client.queue_subscribe(shared.deps.bus.names.progress(), QUEUE_GROUP.to_owned()).await?;
    Ok((renewals, progress))
}

pub(crate) async fn run(
    shared: Shared,
    (mut renewals, mut progress): (async_nats::Subscriber, async_nats::Subscriber),
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            Some(message) = renewals.next() => renew(&shared, message).await,
            Some(message) = progress.next() => record_progress(&shared, message).await,
            else => return Ok(()),
        }
    }
}

async fn renew(shared: &Shared, message: async_nats::Message) {
    let Some(reply) = message.reply.clone() else { return };
    let request: LeaseRenewal = match serde_json::from_slice(&message.payload) {
        Ok(r) => r,
        Err(err) => {
            tracing::warn!(error = %err, "malformed lease renewal ignored");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "lease_decode").increment(1);
            return;
        }
    };
    let until = ax_domain::now() + chrono::TimeDelta::from_std(shared.config.scheduler.lease.0).unwrap_or(chrono::TimeDelta::MAX);
    match shared.deps.store.renew_held(request.worker_id.as_str(), &request.held, until).await {
        Ok(lost) => {
            let answer = LeaseRenewed { until, lost };
            let body = serde_json::to_vec(&answer).expect("answers serialize");
            let _ = shared.deps.bus.client.publish(reply, body.into()).await;
        }
        // No answer: the worker keeps trying, and stops its work if a lease passes.
        Err(err) => {
            tracing::warn!(worker_id = %request.worker_id, error = %err, "lease renewal failed");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "lease_renewal").increment(1);
        }
    }
}

async fn record_progress(shared: &Shared, message: async_nats::Message) {
    let Ok(progress) = serde_json::from_slice::<Progress>(&message.payload) else {
        ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "progress_decode").increment(1);
        return;
    };
    if let Err(err) = shared
        .deps
        .store
        .set_progress(&progress.instance_id, progress.attempt, progress.worker_id.as_str(), progress.percent, &progress.message)
        .await
    {
        tracing::debug!(error = %err, "progress not stored");
    }
}
