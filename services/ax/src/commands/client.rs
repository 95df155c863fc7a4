//! Commands that talk to the api over HTTP.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use ax_runtime::Config;
use serde_json::{json, Value};

pub(crate) fn url(config: &Config, path: &str) -> String {
    format!("{}{path}", config.http.api_url.trim_end_matches('/'))
}

/// Prints the api's answer; a 4xx/5xx prints the error and fails.
pub(crate) async fn finish(response: reqwest::Response) -> anyhow::Result<(ExitCode, Value)> {
    let status = response.status();
    let body: Value = response.json().await.context("reading the api's answer")?;
    if status.is_success() {
        Ok((ExitCode::SUCCESS, body))
    } else {
        let error = &body["error"];
        let field = error["field"].as_str().filter(|f| !f.is_empty()).map(|f| format!(" (field {f})")).unwrap_or_default();
        eprintln!("error: {} {}{field}", error["code"].as_str().unwrap_or("error"), error["message"].as_str().unwrap_or(""));
        Ok((ExitCode::FAILURE, body))
    }
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::new()
}

pub async fn task_apply(config: &Config, file: &Path) -> anyhow::Result<ExitCode> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the definition from stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    // Validate locally first: the same rules, with the field named, before any network.
    let definition = ax_domain::task::TaskDefinition::from_json(text.as_bytes()).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let response = client()
        .put(url(config, &format!("/api/v1/tasks/{}", definition.task_name)))
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .with_context(|| format!("reaching the api at {}", config.http.api_url))?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        let verb = if body["changed"].as_bool() == Some(true) { "applied" } else { "unchanged" };
        println!("task {} {verb}, version {}", body["name"].as_str().unwrap_or_default(), body["version"]);
    }
    Ok(code)
}

pub async fn task_list(config: &Config) -> anyhow::Result<ExitCode> {
    let response = client().get(url(config, "/api/v1/tasks")).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    for task in body["tasks"].as_array().into_iter().flatten() {
        println!(
            "{:<32} v{:<4} {:<8} {}",
            task["name"].as_str().unwrap_or_default(),
            task["version"],
            if task["enabled"].as_bool() == Some(true) { "enabled" } else { "disabled" },
            task["definition"]["owner"].as_str().unwrap_or_default()
        );
    }
    Ok(code)
}

pub async fn trigger(
    config: &Config,
    task: &str,
    params: &str,
    trigger_id: Option<String>,
    payload_version: Option<u32>,
    priority: Option<String>,
    delay_sec: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let params: Value = serde_json::from_str(params).context("--params must be JSON")?;
    let mut body = json!({ "params": params });
    if let Some(id) = trigger_id {
        body["trigger_id"] = json!(id);
    }
    if let Some(v) = payload_version {
        body["payload_version"] = json!(v);
    }
    if let Some(p) = priority {
        body["priority"] = json!(p);
    }
    if let Some(d) = delay_sec {
        body["delay_sec"] = json!(d);
    }
    let response = client()
        .post(url(config, &format!("/api/v1/tasks/{task}/trigger")))
        .json(&body)
        .send()
        .await
        .context("reaching the api")?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        let note = if body["created"].as_bool() == Some(true) { "" } else { " (already existed for this trigger id)" };
        println!("{}{note}", body["instance_id"].as_str().unwrap_or_default());
    }
    Ok(code)
}

pub async fn instance(config: &Config, id: &str) -> anyhow::Result<ExitCode> {
    let response = client().get(url(config, &format!("/api/v1/instances/{id}"))).send().await.context("reaching the api")?;
    let (code, instance) = finish(response).await?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    println!("{}", serde_json::to_string_pretty(&instance)?);
    let response = client().get(url(config, &format!("/api/v1/instances/{id}/transitions"))).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    println!("\n{:<4} {:<28} {:<11} {:<11} {:<24} reason", "seq", "time", "from", "to", "operator");
    for t in body["transitions"].as_array().into_iter().flatten() {
        println!(
            "{:<4} {:<28} {:<11} {:<11} {:<24} {}",
            t["seq"],
            t["created_at"].as_str().unwrap_or_default(),
            t["from_state"].as_str().unwrap_or("-"),
            t["to_state"].as_str().unwrap_or_default(),
            t["operator"].as_str().unwrap_or_default(),
            t["reason"].as_str().unwrap_or_default()
        );
    }
    Ok(code)
}

pub async fn task_action(config: &Config, task: &str, action: &str) -> anyhow::Result<ExitCode> {
    let response = client().post(url(config, &format!("/api/v1/tasks/{task}/{action}"))).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        let state = if body["enabled"].as_bool() == Some(true) { "enabled" } else { "disabled" };
        println!("task {task} {state}");
    }
    Ok(code)
}

pub async fn task_delete(config: &Config, task: &str) -> anyhow::Result<ExitCode> {
    let response = client().delete(url(config, &format!("/api/v1/tasks/{task}"))).send().await.context("reaching the api")?;
    if response.status().is_success() {
        println!("task {task} deleted (its instances and audit trail are kept)");
        return Ok(ExitCode::SUCCESS);
    }
    Ok(finish(response).await?.0)
}

pub async fn backfill(config: &Config, task: &str, from: &str, to: &str) -> anyhow::Result<ExitCode> {
    let response = client()
        .post(url(config, &format!("/api/v1/tasks/{task}/backfill")))
        .json(&json!({ "from": from, "to": to }))
        .send()
        .await
        .context("reaching the api")?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        println!("{} fires in range: {} created, {} already had an instance", body["fires"], body["created"], body["already_existed"]);
    }
    Ok(code)
}

/// Computed locally with the very code the scheduler fires with.
pub fn cron_preview(expr: &str, tz: &str, n: usize) -> anyhow::Result<ExitCode> {
    let schedule = ax_domain::cron_expr::CronSchedule::parse(expr, tz)?;
    for fire in schedule.upcoming(ax_domain::now(), n.clamp(1, 1000)) {
        println!("{}  {}", fire.with_timezone(&schedule.zone()).to_rfc3339(), fire.to_rfc3339());
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn instance_action(config: &Config, id: &str, action: &str) -> anyhow::Result<ExitCode> {
    let response = client().post(url(config, &format!("/api/v1/instances/{id}/{action}"))).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    if code == ExitCode::SUCCESS {
        match action {
            "rerun" => println!("{} reruns {id}", body["instance_id"].as_str().unwrap_or_default()),
            _ => println!("{id} is {}", body["state"].as_str().unwrap_or_default()),
        }
    }
    Ok(code)
}

pub async fn workers(config: &Config) -> anyhow::Result<ExitCode> {
    let response = client().get(url(config, "/api/v1/workers")).send().await.context("reaching the api")?;
    let (code, body) = finish(response).await?;
    println!("{:<32} {:<10} {:>9} {:<8} {:<28} tags", "worker", "group", "running", "alive", "last heartbeat");
    for w in body["workers"].as_array().into_iter().flatten() {
        println!(
            "{:<32} {:<10} {:>4}/{:<4} {:<8} {:<28} {}",
            w["id"].as_str().unwrap_or_default(),
            w["group"].as_str().unwrap_or_default(),
            w["running"],
            w["max_running"],
            if w["alive"].as_bool() == Some(true) { "yes" } else { "LOST" },
            w["last_heartbeat"].as_str().unwrap_or_default(),
            w["tags"].as_array().map(|t| t.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(",")).unwrap_or_default()
        );
    }
    Ok(code)
}
