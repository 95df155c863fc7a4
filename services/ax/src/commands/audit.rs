//! `ax audit replay` and `ax audit verify`: straight to NATS (and MySQL for
//! verify), since they read the stream itself.

use std::process::ExitCode;

use ax_audit::{ReplayFilter, StreamEvent};
use ax_domain::event::EventBody;
use ax_domain::period::parse_time;
use ax_runtime::Config;

use super::serve::{bus, store};
use crate::cli::OutputFormat;

fn time(value: Option<&str>, flag: &str) -> anyhow::Result<Option<ax_domain::Timestamp>> {
    value.map(|v| parse_time(v, ax_domain::now()).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))).transpose()
}

pub async fn replay(
    config: &Config,
    task: Option<String>,
    instance: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
    format: OutputFormat,
) -> anyhow::Result<ExitCode> {
    if let Some(task) = &task {
        anyhow::ensure!(ax_domain::task::is_valid_task_name(task), "--task must match [a-z0-9_-]{{1,64}}");
    }
    if let Some(instance) = &instance {
        instance.parse::<ax_domain::ids::InstanceId>().map_err(|e| anyhow::anyhow!("--instance: {e}"))?;
    }
    let filter = ReplayFilter { task, instance, since: time(since, "since")?, until: time(until, "until")? };
    let bus = bus(config, "ax audit replay").await?;
    if format == OutputFormat::Table {
        println!("{:<8} {:<27} {:<30} {:<20} {:>3} {:>3} {:<23} {:<26} reason", "stream", "time", "instance", "task", "seq", "try", "transition", "operator");
    }
    let mut undecodable = 0;
    ax_audit::replay(&bus, &filter, |message: StreamEvent| match (&message.event, format) {
        (Ok(event), OutputFormat::Json) => {
            let mut json = event.to_json();
            json["stream_seq"] = message.stream_seq.into();
            println!("{json}");
        }
        (Ok(event), OutputFormat::Table) => match &event.body {
            EventBody::InstanceTransitioned(t) => println!(
                "{:<8} {:<27} {:<30} {:<20} {:>3} {:>3} {:<23} {:<26} {}",
                message.stream_seq,
                event.time.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
                t.instance_id,
                t.task,
                t.seq,
                t.attempt,
                format!("{} → {}", t.from.map_or("-", |s| s.as_str()), t.to.as_str()),
                t.operator,
                t.reason
            ),
            EventBody::TaskChanged(c) => println!(
                "{:<8} {:<27} {:<30} {:<20} {:>3} {:>3} {:<23} {:<26}",
                message.stream_seq,
                event.time.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
                "-",
                c.task,
                "",
                "",
                format!("task {} v{}", c.action.token(), c.task_version),
                c.operator
            ),
            EventBody::HealthReported(r) => println!(
                "{:<8} {:<27} {:<30} health report {}: {} of {} tasks flagged",
                message.stream_seq,
                event.time.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
                "-",
                r.report_id,
                r.tasks_flagged,
                r.tasks_total
            ),
        },
        (Err(err), _) => {
            undecodable += 1;
            eprintln!("stream seq {} on {}: not an AX event ({err})", message.stream_seq, message.subject);
        }
    })
    .await?;
    Ok(if undecodable == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub async fn verify(config: &Config, since: Option<&str>, until: Option<&str>, format: OutputFormat) -> anyhow::Result<ExitCode> {
    let now = ax_domain::now();
    let since = time(since, "since")?.unwrap_or(now - chrono::TimeDelta::hours(24));
    let until = time(until, "until")?.unwrap_or(now + chrono::TimeDelta::seconds(1));
    anyhow::ensure!(since < until, "--until must be after --since");
    let store = store(config).await?;
    let bus = bus(config, "ax audit verify").await?;
    let report = ax_audit::verify(&store, &bus, since, until).await?;
    if format == OutputFormat::Json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for problem in &report.problems {
            println!("{problem}");
        }
        println!(
            "{}: {} transitions in instance_transitions, {} in AX_EVENTS, {} instances, {} still in the outbox, {} problems ({} → {})",
            if report.is_clean() { "ok" } else { "FAILED" },
            report.audit_rows,
            report.stream_events,
            report.instances,
            report.pending,
            report.problems.len(),
            report.since.format("%Y-%m-%dT%H:%M:%SZ"),
            report.until.format("%Y-%m-%dT%H:%M:%SZ"),
        );
    }
    Ok(if report.is_clean() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
