//! `ax events tail`: live instance events as JSON lines.

use std::process::ExitCode;

use anyhow::Context as _;
use ax_domain::event::Event;
use ax_runtime::Config;
use futures::StreamExt;

pub async fn tail(config: &Config, task: Option<&str>) -> anyhow::Result<ExitCode> {
    if let Some(task) = task {
        anyhow::ensure!(ax_domain::task::is_valid_task_name(task), "--task must match [a-z0-9_-]{{1,64}}");
    }
    let names = config.nats.names();
    let client = async_nats::connect(config.nats.nats_url.expose()).await.context("connecting to NATS")?;
    let mut events = client.subscribe(names.instance_events_of(task)).await.context("subscribing")?;
    while let Some(message) = events.next().await {
        match Event::decode(&message.payload) {
            Ok(event) => println!("{}", event.to_json()),
            Err(err) => eprintln!("undecodable event on {}: {err}", message.subject),
        }
    }
    Ok(ExitCode::SUCCESS)
}
