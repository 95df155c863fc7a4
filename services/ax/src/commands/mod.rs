//! One function per subcommand.

mod alert;
mod audit;
mod client;
mod events;
mod logs;
mod report;
mod serve;

use std::process::ExitCode;

use crate::cli::{AuditCommand, Cli, Command, CronCommand, EventsCommand, NatsCommand, ReportCommand, TaskCommand};

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = cli.config;
    match cli.command {
        Command::Dev => serve::dev(config).await,
        Command::Scheduler => serve::scheduler(config).await,
        Command::Api => serve::api(config).await,
        Command::Worker => serve::worker(config).await,
        Command::Chain => serve::chain(config).await,
        Command::Cron { command: CronCommand::Preview { expr, tz, n } } => client::cron_preview(&expr, &tz, n),
        Command::Task { command: TaskCommand::Enable { task } } => client::task_action(&config, &task, "enable").await,
        Command::Task { command: TaskCommand::Disable { task } } => client::task_action(&config, &task, "disable").await,
        Command::Task { command: TaskCommand::Delete { task } } => client::task_delete(&config, &task).await,
        Command::Task { command: TaskCommand::Backfill { task, from, to } } => client::backfill(&config, &task, &from, &to).await,
        Command::Monitor => serve::monitor(config).await,
        Command::LogSink => serve::log_sink(config).await,
        Command::Migrate => serve::migrate(config).await,
        Command::Nats { command: NatsCommand::Apply } => serve::nats_apply(config).await,
        Command::Task { command: TaskCommand::Apply { file } } => client::task_apply(&config, &file).await,
        Command::Task { command: TaskCommand::List } => client::task_list(&config).await,
        Command::Trigger { task, params, trigger_id, payload_version, priority, delay_sec } => {
            client::trigger(&config, &task, &params, trigger_id, payload_version, priority, delay_sec).await
        }
        Command::Instance { id } => client::instance(&config, &id).await,
        Command::Cancel { id } => client::instance_action(&config, &id, "cancel").await,
        Command::Rerun { id } => client::instance_action(&config, &id, "rerun").await,
        Command::Workers => client::workers(&config).await,
        Command::Events { command: EventsCommand::Tail { task } } => events::tail(&config, task.as_deref()).await,
        Command::Logs { id, follow, attempt, level, format } => logs::logs(&config, &id, follow, attempt, level.as_deref(), format).await,
        Command::Trace { trace_id } => logs::trace(&config, &trace_id).await,
        Command::Audit { command: AuditCommand::Replay { task, instance, since, until, format } } => {
            audit::replay(&config, task, instance, since.as_deref(), until.as_deref(), format).await
        }
        Command::Audit { command: AuditCommand::Verify { since, until, format } } => {
            audit::verify(&config, since.as_deref(), until.as_deref(), format).await
        }
        Command::Report { command: ReportCommand::Health { since, until, format } } => {
            report::health(&config, since.as_deref(), until.as_deref(), format).await
        }
        Command::Alert { command } => alert::run(&config, command).await,
    }
}
