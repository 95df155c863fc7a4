//! The workers the api shows: every api replica listens to heartbeats itself (and
//! calls the roll when it starts), so it needs no scheduler to answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_bus::Bus;
use ax_domain::protocol::Heartbeat;
use ax_domain::Timestamp;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct Directory {
    workers: Arc<Mutex<HashMap<String, (Heartbeat, Timestamp)>>>,
}

impl Directory {
    /// Starts listening; stops with `shutdown`.
    pub async fn start(bus: &Bus, shutdown: CancellationToken) -> Result<Self, async_nats::SubscribeError> {
        let directory = Self::default();
        let mut heartbeats = bus.client.subscribe(bus.names.heartbeat()).await?;
        let _ = bus.client.publish(bus.names.roll_call(), bytes::Bytes::new()).await;
        let workers = directory.workers.clone();
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    message = heartbeats.next() => match message { Some(m) => m, None => return },
                };
                if let Ok(beat) = serde_json::from_slice::<Heartbeat>(&message.payload) {
                    let mut map = workers.lock().expect("directory lock");
                    if beat.leaving {
                        map.remove(beat.worker_id.as_str());
                    } else {
                        map.insert(beat.worker_id.as_str().to_owned(), (beat, ax_domain::now()));
                    }
                }
            }
        });
        Ok(directory)
    }

    /// Every worker heard from within `stale_after`, and those silent longer
    /// flagged as such (kept a while so an operator sees what vanished).
    pub fn list(&self, stale_after: Duration) -> Vec<(Heartbeat, Timestamp, bool)> {
        let now = ax_domain::now();
        let stale = chrono::TimeDelta::from_std(stale_after).unwrap_or(chrono::TimeDelta::MAX);
        let mut map = self.workers.lock().expect("directory lock");
        map.retain(|_, (_, seen)| now - *seen < stale * 10);
        let mut list: Vec<_> = map.values().map(|(beat, seen)| (beat.clone(), *seen, now - *seen < stale)).collect();
        list.sort_by(|a, b| a.0.worker_id.cmp(&b.0.worker_id));
        list
    }
}
