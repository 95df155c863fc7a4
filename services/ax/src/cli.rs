//! The command line. Every subcommand takes the same configuration (the global
//! flags of [`ax_runtime::Config`], each with its `AX_…` variable).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "ax", version, about = "AX: a distributed scheduler for batch work", propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub config: ax_runtime::Config,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long, global = true)]
    pub dump_config: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Everything in one process: migrations, scheduler, api, one worker, monitor, log sink, a demo task.
    Dev,
    /// The scheduler: trigger intake, dispatch, worker reports, outbox relay.
    Scheduler,
    /// The HTTP API, `/healthz` and `/metrics`.
    Api,
    /// A worker with the built-in handlers `shell` and `noop`.
    Worker,
    /// The chain service: fires downstream tasks when an upstream instance ends.
    Chain,
    /// Cron expressions.
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
    /// The monitor: metrics and alerts from the event stream, the monthly health report.
    Monitor,
    /// The log sink: worker log batches from NATS into MySQL, with day-based retention.
    LogSink,
    /// Apply the MySQL migrations.
    Migrate,
    /// NATS streams and consumers.
    Nats {
        #[command(subcommand)]
        command: NatsCommand,
    },
    /// Task definitions.
    Task {
        #[command(subcommand)]
        command: TaskCommand,
    },
    /// Fire a task now, through the api.
    Trigger {
        task: String,
        /// Params as a JSON object.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Makes the trigger idempotent: the same id never creates a second instance.
        #[arg(long)]
        trigger_id: Option<String>,
        #[arg(long)]
        payload_version: Option<u32>,
        /// urgent, normal or low.
        #[arg(long)]
        priority: Option<String>,
        /// Run this many seconds from now.
        #[arg(long)]
        delay_sec: Option<u64>,
    },
    /// Show one instance and its transitions.
    Instance { id: String },
    /// Cancel an instance in any non-final state (a running attempt is told to stop).
    Cancel { id: String },
    /// Run a finished instance again, as a new instance linked to it.
    Rerun { id: String },
    /// Every worker with its load and last heartbeat.
    Workers,
    /// The event stream.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// An instance's log, in order across attempts and workers.
    Logs {
        /// The instance id (`ins_…`).
        id: String,
        /// Keep printing new lines until the instance has finished.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only this attempt.
        #[arg(long)]
        attempt: Option<u32>,
        /// Only lines at this level or above: trace, debug, info, warn, error.
        #[arg(long)]
        level: Option<String>,
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        format: LogFormat,
    },
    /// Everything about one run, by its trace id (`trc_…`).
    Trace { trace_id: String },
    /// Read the event stream back and check it against MySQL's audit trail.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Alerts, alert rules and notification channels.
    Alert {
        #[command(subcommand)]
        command: AlertCommand,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Print the history from AX_EVENTS (an ordered consumer from --since), oldest first.
    Replay {
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        instance: Option<String>,
        /// RFC 3339 time, a date, or an age (24h, 7d); the whole stream when absent.
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        /// json: one event per line; table: one transition per row.
        #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
        format: OutputFormat,
    },
    /// Compare AX_EVENTS with MySQL's audit trail; name every gap or mismatch and
    /// exit non-zero if there is any.
    Verify {
        /// Default: 24 hours ago.
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
}

#[derive(Subcommand, Debug)]
pub enum ReportCommand {
    /// Task health: failures in a row, not firing, slow runs, success rate, owner
    /// (thresholds from the AX_HEALTH_* settings).
    Health {
        /// Default: 30 days ago.
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
}

#[derive(Subcommand, Debug)]
pub enum AlertCommand {
    /// The alert history, newest first.
    List {
        /// firing or resolved.
        #[arg(long)]
        status: Option<String>,
        /// P0, P1 or P2.
        #[arg(long)]
        level: Option<String>,
        #[arg(long)]
        task: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One alert with its deliveries.
    Show { id: String },
    /// Acknowledge an alert: no more reminders.
    Ack {
        id: String,
        /// Who acknowledges.
        #[arg(long)]
        by: String,
        #[arg(long)]
        comment: Option<String>,
    },
    /// Alert rules.
    Rule {
        #[command(subcommand)]
        command: DefinitionCommand,
    },
    /// Notification channels (webhooks).
    Channel {
        #[command(subcommand)]
        command: ChannelCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum DefinitionCommand {
    List,
    /// Create or replace from a JSON file (`-` for stdin).
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    Delete { name: String },
}

#[derive(Subcommand, Debug)]
pub enum ChannelCommand {
    List,
    /// Create or replace from a JSON file (`-` for stdin).
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    Delete { name: String },
    /// Send a test notification (the monitor delivers it).
    Test { name: String },
}

#[derive(Subcommand, Debug)]
pub enum NatsCommand {
    /// Create or update every stream and consumer under `nats/`.
    Apply,
}

#[derive(Subcommand, Debug)]
pub enum TaskCommand {
    /// Register a task (or a new version) from a JSON definition file (`-` for stdin).
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// List registered tasks.
    List,
    /// Let a task fire again (missed cron fires follow its misfire policy).
    Enable { task: String },
    /// Stop a task from firing; running instances finish.
    Disable { task: String },
    /// Delete a task; its instances and audit trail are kept.
    Delete { task: String },
    /// Create the instances of every cron fire between two times that has none yet.
    Backfill {
        task: String,
        /// RFC 3339, e.g. 2026-12-01T00:00:00Z
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum CronCommand {
    /// The next fire times of an expression, as AX will fire them.
    Preview {
        expr: String,
        /// IANA time zone the expression is read in.
        #[arg(long, default_value = "UTC")]
        tz: String,
        #[arg(short = 'n', long, default_value_t = 10)]
        n: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum EventsCommand {
    /// Print instance events as JSON lines as they happen.
    Tail {
        /// Only this task's events.
        #[arg(long)]
        task: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// IOx once shipped two settings on one variable; never again.
    #[test]
    fn every_env_var_is_unique_and_prefixed() {
        let vars = ax_runtime::config::env_vars(&Cli::command());
        let mut seen = std::collections::HashSet::new();
        for var in &vars {
            assert!(var.starts_with("AX_"), "{var} lacks the AX_ prefix");
            assert!(seen.insert(var), "{var} is read by two settings");
        }
    }
}
