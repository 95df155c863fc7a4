//! `ax alert …`: alerts, rules and channels, through the api.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use ax_runtime::Config;
use serde_json::{json, Value};

use super::client::{client, finish, url};
use crate::cli::{AlertCommand, ChannelCommand, DefinitionCommand};

async fn get(config: &Config, path: &str) -> anyhow::Result<(ExitCode, Value)> {
    let response = client().get(url(config, path)).send().await.with_context(|| format!("reaching the api at {}", config.http.api_url))?;
    finish(response).await
}

fn read(file: &Path) -> anyhow::Result<String> {
    if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the definition from stdin")
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
    }
}

pub async fn run(config: &Config, command: AlertCommand) -> anyhow::Result<ExitCode> {
    match command {
        AlertCommand::List { status, level, task, limit } => {
            let mut path = format!("/api/v1/alerts?limit={limit}");
            for (key, value) in [("status", status), ("level", level), ("task", task)] {
                if let Some(v) = value {
                    path.push_str(&format!("&{key}={v}"));
                }
            }
            let (code, body) = get(config, &path).await?;
            println!("{:<30} {:<3} {:<9} {:<20} {:<24} {:>5}  summary", "alert", "lvl", "status", "rule", "fired", "seen");
            for a in body["alerts"].as_array().into_iter().flatten() {
                let mut status = a["status"].as_str().unwrap_or_default().to_owned();
                if a["acknowledged_at"].is_string() {
                    status.push('*');
                }
                println!(
                    "{:<30} {:<3} {:<9} {:<20} {:<24} {:>5}  {}",
                    a["id"].as_str().unwrap_or_default(),
                    a["level"].as_str().unwrap_or_default(),
                    status,
                    a["rule"].as_str().unwrap_or_default(),
                    a["fired_at"].as_str().unwrap_or_default().get(..19).unwrap_or_default(),
                    a["occurrences"].to_string(),
                    a["summary"].as_str().unwrap_or_default()
                );
            }
            Ok(code)
        }
        AlertCommand::Show { id } => {
            let (code, body) = get(config, &format!("/api/v1/alerts/{id}")).await?;
            if code == ExitCode::SUCCESS {
                println!("{}", serde_json::to_string_pretty(&body)?);
            }
            Ok(code)
        }
        AlertCommand::Ack { id, by, comment } => {
            let response = client()
                .post(url(config, &format!("/api/v1/alerts/{id}/ack")))
                .json(&json!({ "by": by, "comment": comment }))
                .send()
                .await
                .context("reaching the api")?;
            let (code, _) = finish(response).await?;
            if code == ExitCode::SUCCESS {
                println!("alert {id} acknowledged by {by}");
            }
            Ok(code)
        }
        AlertCommand::Rule { command } => definitions(config, "alert-rules", "rules", command).await,
        AlertCommand::Channel { command } => match command {
            ChannelCommand::List => definitions(config, "alert-channels", "channels", DefinitionCommand::List).await,
            ChannelCommand::Apply { file } => definitions(config, "alert-channels", "channels", DefinitionCommand::Apply { file }).await,
            ChannelCommand::Delete { name } => definitions(config, "alert-channels", "channels", DefinitionCommand::Delete { name }).await,
            ChannelCommand::Test { name } => {
                let response = client().post(url(config, &format!("/api/v1/alert-channels/{name}/test"))).send().await.context("reaching the api")?;
                let (code, _) = finish(response).await?;
                if code == ExitCode::SUCCESS {
                    println!("test notification to {name} queued; the monitor delivers it (see its log, or ax_alert_notifications_total)");
                }
                Ok(code)
            }
        },
    }
}

/// List, apply or delete named definitions under `/api/v1/<resource>`.
async fn definitions(config: &Config, resource: &str, key: &str, command: DefinitionCommand) -> anyhow::Result<ExitCode> {
    match command {
        DefinitionCommand::List => {
            let (code, body) = get(config, &format!("/api/v1/{resource}")).await?;
            for item in body[key].as_array().into_iter().flatten() {
                println!("{item}");
            }
            Ok(code)
        }
        DefinitionCommand::Apply { file } => {
            let text = read(&file)?;
            let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
            let name = value["name"].as_str().context("the definition needs a \"name\"")?.to_owned();
            let response = client()
                .put(url(config, &format!("/api/v1/{resource}/{name}")))
                .header("content-type", "application/json")
                .body(text)
                .send()
                .await
                .context("reaching the api")?;
            let (code, body) = finish(response).await?;
            if code == ExitCode::SUCCESS {
                let verb = if body["changed"].as_bool() == Some(true) { "applied" } else { "unchanged" };
                println!("{name} {verb}");
            }
            Ok(code)
        }
        DefinitionCommand::Delete { name } => {
            let response = client().delete(url(config, &format!("/api/v1/{resource}/{name}"))).send().await.context("reaching the api")?;
            if response.status().is_success() {
                println!("{name} deleted");
                return Ok(ExitCode::SUCCESS);
            }
            let (code, _) = finish(response).await?;
            Ok(code)
        }
    }
}
