//! The stream and consumer definitions under `nats/`, compiled in and applied
//! idempotently (create, or update when the server has an older version).

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::stream;

use ax_domain::subjects::Names;

use crate::{Bus, BusError};

pub const EVENTS: &str = "AX_EVENTS";
pub const TRIGGERS: &str = "AX_TRIGGERS";
pub const LOGS: &str = "AX_LOGS";
pub const INTAKE_CONSUMER: &str = "ax-intake";
pub const CHAIN_CONSUMER: &str = "ax-chain";
pub const MONITOR_CONSUMER: &str = "ax-monitor";
pub const LOG_SINK_CONSUMER: &str = "ax-log-sink";

const STREAM_FILES: [(&str, &str); 3] = [
    ("nats/streams/AX_EVENTS.json", include_str!("../../../nats/streams/AX_EVENTS.json")),
    ("nats/streams/AX_TRIGGERS.json", include_str!("../../../nats/streams/AX_TRIGGERS.json")),
    ("nats/streams/AX_LOGS.json", include_str!("../../../nats/streams/AX_LOGS.json")),
];

/// (file, stream, definition)
const CONSUMER_FILES: [(&str, &str, &str); 4] = [
    ("nats/consumers/AX_TRIGGERS.ax-intake.json", TRIGGERS, include_str!("../../../nats/consumers/AX_TRIGGERS.ax-intake.json")),
    ("nats/consumers/AX_EVENTS.ax-chain.json", EVENTS, include_str!("../../../nats/consumers/AX_EVENTS.ax-chain.json")),
    ("nats/consumers/AX_EVENTS.ax-monitor.json", EVENTS, include_str!("../../../nats/consumers/AX_EVENTS.ax-monitor.json")),
    ("nats/consumers/AX_LOGS.ax-log-sink.json", LOGS, include_str!("../../../nats/consumers/AX_LOGS.ax-log-sink.json")),
];

/// The stream definitions, rewritten for a namespace.
///
/// # Errors
/// A file that does not parse (a build that shipped a broken file).
pub fn stream_configs(names: &Names) -> Result<Vec<stream::Config>, BusError> {
    STREAM_FILES
        .iter()
        .map(|(file, json)| {
            let mut config: stream::Config = serde_json::from_str(json).map_err(|source| BusError::Definition { file, source })?;
            config.name = names.stream(&config.name);
            config.subjects = config.subjects.iter().map(|s| names.rebase(s)).collect();
            Ok(config)
        })
        .collect()
}

/// The consumer definitions: (stream base name, config).
///
/// # Errors
/// A file that does not parse.
pub fn consumer_configs(names: &Names) -> Result<Vec<(&'static str, pull::Config)>, BusError> {
    CONSUMER_FILES
        .iter()
        .map(|(file, stream, json)| {
            let mut config: pull::Config = serde_json::from_str(json).map_err(|source| BusError::Definition { file, source })?;
            config.filter_subject = names.rebase(&config.filter_subject);
            config.filter_subjects = config.filter_subjects.iter().map(|s| names.rebase(s)).collect();
            Ok((*stream, config))
        })
        .collect()
}

impl Bus {
    pub fn stream_configs(&self) -> Result<Vec<stream::Config>, BusError> {
        stream_configs(&self.names)
    }

    /// Creates or updates every stream and consumer AX owns. Safe to run from every
    /// service at every start.
    ///
    /// # Errors
    /// NATS refused a definition (e.g. JetStream disabled, or subjects overlapping
    /// another stream).
    pub async fn apply_definitions(&self) -> Result<(), BusError> {
        for config in self.stream_configs()? {
            let name = config.name.clone();
            self.jetstream.create_or_update_stream(config).await.map_err(|source| BusError::Stream { stream: name.clone(), source })?;
            tracing::debug!(stream = %name, "stream applied");
        }
        for (stream_base, config) in consumer_configs(&self.names)? {
            let stream_name = self.names.stream(stream_base);
            let durable = config.durable_name.clone().unwrap_or_default();
            let err = |reason: String| BusError::Consumer { stream: stream_name.clone(), consumer: durable.clone(), reason };
            let stream = self.jetstream.get_stream(&stream_name).await.map_err(|e| err(e.to_string()))?;
            if stream.create_consumer(config.clone()).await.is_err() {
                // Exists with another configuration: bring it to this one.
                stream.update_consumer(config).await.map_err(|e| err(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// A durable pull consumer AX owns, by stream base name and durable name.
    ///
    /// # Errors
    /// The stream or consumer is missing (definitions not applied).
    pub async fn consumer(&self, stream_base: &str, durable: &str) -> Result<async_nats::jetstream::consumer::PullConsumer, BusError> {
        let stream_name = self.names.stream(stream_base);
        let err = |reason: String| BusError::Consumer { stream: stream_name.clone(), consumer: durable.into(), reason };
        let stream = self.jetstream.get_stream(&stream_name).await.map_err(|e| err(e.to_string()))?;
        stream.get_consumer(durable).await.map_err(|e| err(e.to_string()))
    }

    /// The trigger intake's durable pull consumer.
    ///
    /// # Errors
    /// The stream or consumer is missing (definitions not applied).
    pub async fn intake_consumer(&self) -> Result<async_nats::jetstream::consumer::PullConsumer, BusError> {
        self.durable_consumer(TRIGGERS, INTAKE_CONSUMER).await
    }

    /// The monitor's durable pull consumer of `AX_EVENTS`.
    ///
    /// # Errors
    /// The stream or consumer is missing (definitions not applied).
    pub async fn monitor_consumer(&self) -> Result<async_nats::jetstream::consumer::PullConsumer, BusError> {
        self.durable_consumer(EVENTS, MONITOR_CONSUMER).await
    }

    /// The log sink's durable pull consumer of `AX_LOGS`.
    ///
    /// # Errors
    /// The stream or consumer is missing (definitions not applied).
    pub async fn log_sink_consumer(&self) -> Result<async_nats::jetstream::consumer::PullConsumer, BusError> {
        self.durable_consumer(LOGS, LOG_SINK_CONSUMER).await
    }

    async fn durable_consumer(&self, stream_base: &str, durable: &str) -> Result<async_nats::jetstream::consumer::PullConsumer, BusError> {
        let stream_name = self.names.stream(stream_base);
        let err = |reason: String| BusError::Consumer { stream: stream_name.clone(), consumer: durable.into(), reason };
        let stream = self.jetstream.get_stream(&stream_name).await.map_err(|e| err(e.to_string()))?;
        stream.get_consumer(durable).await.map_err(|e| err(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_definition_file_parses_and_follows_the_namespace() {
        let streams = stream_configs(&Names::new("t1")).unwrap();
        let names: Vec<&str> = streams.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["AX_EVENTS_T1", "AX_TRIGGERS_T1", "AX_LOGS_T1"]);
        assert_eq!(streams[0].subjects, ["t1.event.>"]);
        assert!(streams.iter().all(|s| s.storage == stream::StorageType::File && !s.duplicate_window.is_zero()));
        assert_eq!(streams[1].retention, stream::RetentionPolicy::WorkQueue);
        let consumers = consumer_configs(&Names::new("t1")).unwrap();
        assert_eq!(consumers[0].1.durable_name.as_deref(), Some(INTAKE_CONSUMER));
        assert_eq!(consumers[1].1.filter_subjects, ["t1.event.instance.*.succeeded", "t1.event.instance.*.failed"]);
        assert_eq!(consumers[2], (EVENTS, consumers[2].1.clone()));
        assert_eq!(consumers[2].1.durable_name.as_deref(), Some(MONITOR_CONSUMER));
        assert_eq!(consumers[2].1.deliver_policy, async_nats::jetstream::consumer::DeliverPolicy::New);
        assert_eq!(consumers[3].1.durable_name.as_deref(), Some(LOG_SINK_CONSUMER));
    }
}
