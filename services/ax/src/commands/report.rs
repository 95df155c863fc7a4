//! `ax report health`, through the api.

use std::process::ExitCode;

use anyhow::Context as _;
use ax_runtime::Config;
use serde_json::Value;

use super::client::{client, finish, url};
use crate::cli::OutputFormat;

pub async fn health(config: &Config, since: Option<&str>, until: Option<&str>, format: OutputFormat) -> anyhow::Result<ExitCode> {
    let m = &config.observe.monitor;
    let mut path = format!(
        "/api/v1/reports/health?failure_streak={}&no_fire_days={}&duration_factor={}",
        m.health_failure_streak, m.health_no_fire_days, m.health_duration_factor
    );
    if let Some(s) = since {
        path.push_str(&format!("&since={s}"));
    }
    if let Some(u) = until {
        path.push_str(&format!("&until={u}"));
    }
    let response = client().get(url(config, &path)).send().await.context("reaching the api")?;
    let (code, report) = finish(response).await?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    if format == OutputFormat::Json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(code);
    }
    println!(
        "task health {} → {}: {} of {} tasks need attention\n",
        report["since"].as_str().unwrap_or_default(),
        report["until"].as_str().unwrap_or_default(),
        report["tasks_flagged"],
        report["tasks_total"]
    );
    println!("{:<28} {:<16} {:>5} {:>8} {:>7} {:>9} {:>9}  flags", "task", "owner", "runs", "success", "streak", "last fire", "p95");
    for t in report["tasks"].as_array().into_iter().flatten() {
        let success = t["success_rate"].as_f64().map_or("-".to_owned(), |r| format!("{:.0}%", r * 100.0));
        let last = t["days_since_fired"].as_f64().map_or("never".to_owned(), |d| format!("{d:.1}d ago"));
        let p95 = t["p95_duration_sec"].as_f64().map_or("-".to_owned(), |s| format!("{s:.1}s"));
        let flags: Vec<&str> = t["flags"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        println!(
            "{:<28} {:<16} {:>5} {:>8} {:>7} {:>9} {:>9}  {}",
            t["task"].as_str().unwrap_or_default(),
            t["owner"].as_str().unwrap_or_default(),
            t["runs"].to_string(),
            success,
            t["failure_streak"].to_string(),
            last,
            p95,
            flags.join(", ")
        );
        for slow in t["slow_runs"].as_array().into_iter().flatten() {
            println!("{:<28}   slow run {} took {:.1}s", "", slow["instance_id"].as_str().unwrap_or_default(), slow["duration_sec"].as_f64().unwrap_or(0.0));
        }
    }
    Ok(code)
}
