//! `ax logs ID [-f]` and `ax trace ID`, through the api.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ax_runtime::Config;
use serde_json::Value;

use super::client::{client, finish, url};
use crate::cli::LogFormat;

fn print_line(line: &Value, format: LogFormat) {
    match format {
        LogFormat::Json => println!("{line}"),
        LogFormat::Text => println!(
            "{} [attempt {}] {:<5} {:<7} {}: {}",
            line["ts"].as_str().unwrap_or_default(),
            line["attempt"],
            line["level"].as_str().unwrap_or_default().to_uppercase(),
            line["stream"].as_str().unwrap_or_default(),
            line["worker_id"].as_str().unwrap_or_default(),
            line["message"].as_str().unwrap_or_default()
        ),
    }
}

fn query(attempt: Option<u32>, level: Option<&str>) -> String {
    let mut q = String::new();
    if let Some(a) = attempt {
        q.push_str(&format!("&attempt={a}"));
    }
    if let Some(l) = level {
        q.push_str(&format!("&level={l}"));
    }
    q
}

pub async fn logs(config: &Config, id: &str, follow: bool, attempt: Option<u32>, level: Option<&str>, format: LogFormat) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(id.parse::<ax_domain::ids::InstanceId>().is_ok(), "{id:?} is not an instance id (ins_…)");
    if follow {
        return follow_logs(config, id, attempt, level, format).await;
    }
    let mut after = String::new();
    loop {
        let path = format!("/api/v1/instances/{id}/logs?limit=10000{}{after}", query(attempt, level));
        let response = client().get(url(config, &path)).send().await.with_context(|| format!("reaching the api at {}", config.http.api_url))?;
        let (code, body) = finish(response).await?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
        for line in body["lines"].as_array().into_iter().flatten() {
            print_line(line, format);
        }
        if body["more"].as_bool() != Some(true) {
            return Ok(ExitCode::SUCCESS);
        }
        after = format!("&after={}", body["next"].as_str().unwrap_or_default());
    }
}

/// Reads the api's server-sent events until `end`, reconnecting with
/// `Last-Event-ID` when the connection drops, so no line is missed or repeated.
async fn follow_logs(config: &Config, id: &str, attempt: Option<u32>, level: Option<&str>, format: LogFormat) -> anyhow::Result<ExitCode> {
    let path = format!("/api/v1/instances/{id}/logs?follow=true{}", query(attempt, level));
    let mut last_id: Option<String> = None;
    let mut backoff = ax_domain::retry::ExponentialBackoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        let mut request = client().get(url(config, &path)).header("accept", "text/event-stream");
        if let Some(id) = &last_id {
            request = request.header("last-event-id", id.as_str());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(err) if failures < 10 => {
                failures += 1;
                eprintln!("(connection lost: {err}; reconnecting)");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(err) => return Err(err).context("reaching the api"),
        };
        if !response.status().is_success() {
            let (code, _) = finish(response).await?;
            return Ok(code);
        }
        backoff.reset();
        let mut response = response;
        let mut buffer = String::new();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) | Err(_) => break,
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut event = "message";
                let mut data = String::new();
                let mut event_id = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = match v.trim() {
                            "line" => "line",
                            "end" => "end",
                            "error" => "error",
                            _ => "other",
                        };
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    } else if let Some(v) = line.strip_prefix("id:") {
                        event_id = Some(v.trim().to_owned());
                    }
                }
                match event {
                    "line" => {
                        if let Ok(line) = serde_json::from_str::<Value>(&data) {
                            print_line(&line, format);
                        }
                        if event_id.is_some() {
                            last_id = event_id;
                        }
                    }
                    "end" => return Ok(ExitCode::SUCCESS),
                    "error" => {
                        eprintln!("error: {data}");
                        return Ok(ExitCode::FAILURE);
                    }
                    _ => {}
                }
            }
        }
        failures += 1;
        if failures > 10 {
            anyhow::bail!("the api keeps closing the log stream");
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

pub async fn trace(config: &Config, trace_id: &str) -> anyhow::Result<ExitCode> {
    let response = client().get(url(config, &format!("/api/v1/traces/{trace_id}"))).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        println!("{}", serde_json::to_string_pretty(&body)?);
    }
    Ok(code)
}
