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
    /// Everything in one process: migrations, scheduler, api, one worker, a demo task.
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
