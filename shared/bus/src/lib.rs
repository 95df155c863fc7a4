//! NATS and JetStream: connecting, applying the stream definitions of `nats/`, and
//! the headers every event carries.
//!
//! # Layout
//! - [`definitions`]: the files under `nats/`, applied with create-or-update
//! - [`consume`]: the pull loop every durable consumer runs
//! - [`headers`]: `Nats-Msg-Id` and the `Ax-*` headers subscribers route on

pub mod consume;
pub mod definitions;
pub mod headers;

use std::time::Duration;

use ax_domain::subjects::Names;

pub use async_nats;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot connect to NATS at {url}")]
    Connect { url: String, #[source] source: async_nats::ConnectError },
    #[error("cannot apply stream {stream}")]
    Stream { stream: String, #[source] source: async_nats::jetstream::context::CreateStreamError },
    #[error("cannot apply consumer {consumer} on {stream}: {reason}")]
    Consumer { stream: String, consumer: String, reason: String },
    #[error("definition file {file} is invalid")]
    Definition { file: &'static str, #[source] source: serde_json::Error },
}

/// A NATS connection with its JetStream context and namespace.
#[derive(Clone)]
pub struct Bus {
    pub client: async_nats::Client,
    pub jetstream: async_nats::jetstream::Context,
    pub names: Names,
}

impl Bus {
    /// Connects, failing within a few seconds if NATS does not answer (so a service
    /// started without NATS says so instead of hanging). After that, the client
    /// reconnects on its own.
    ///
    /// # Errors
    /// NATS unreachable.
    pub async fn connect(url: &str, names: Names, client_name: &str) -> Result<Self, BusError> {
        let client = async_nats::ConnectOptions::new()
            .name(client_name)
            .connection_timeout(Duration::from_secs(5))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connect(url)
            .await;
        // retry_on_initial_connect returns at once; wait until we are really connected.
        let client = client.map_err(|source| BusError::Connect { url: redact(url), source })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while client.connection_state() != async_nats::connection::State::Connected {
            if tokio::time::Instant::now() > deadline {
                return Err(BusError::Connect {
                    url: redact(url),
                    source: async_nats::ConnectError::from(async_nats::ConnectErrorKind::TimedOut),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let jetstream = async_nats::jetstream::new(client.clone());
        Ok(Self { client, jetstream, names })
    }
}

fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((auth, host)) => match auth.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://***@{host}"),
            None => format!("***@{host}"),
        },
        None => url.to_owned(),
    }
}
