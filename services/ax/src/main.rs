//! `ax`: every AX service and the operator CLI in one binary.
//!
//! # Layout
//! - [`cli`]: the command line (subcommands and the shared configuration)
//! - `commands/serve.rs`: `dev`, `scheduler`, `api`, `worker`, `monitor`, `log-sink`, `migrate`, `nats apply`
//! - `commands/client.rs`: `task apply`, `trigger`, `instance` (through the api)
//! - `commands/events.rs`: `events tail`
//! - `commands/logs.rs`: `logs ID [-f]`, `trace ID` (through the api)
//! - `commands/audit.rs`: `audit replay`, `audit verify` (NATS and MySQL directly)
//! - `commands/report.rs`: `report health` (through the api)
//! - `commands/alert.rs`: `alert list|show|ack`, `alert rule …`, `alert channel …` (through the api)

mod cli;
mod commands;

use clap::{CommandFactory, FromArgMatches};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Parse → validate → tracing → run. Configuration problems are reported before
    // anything connects, naming the variable at fault.
    let args: Vec<String> = std::env::args().collect();
    let command = match ax_runtime::config::apply_config_file(cli::Cli::command(), &args) {
        Ok(command) => command,
        Err(err) => {
            eprintln!("error: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let matches = match command.clone().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(err) => ax_runtime::config::name_the_variable(&command, err).exit(),
    };
    let cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    if let Err(err) = cli.config.validate() {
        eprintln!("error: {err}");
        return std::process::ExitCode::from(2);
    }
    if cli.dump_config {
        print!("{}", cli.config.dump());
        return std::process::ExitCode::SUCCESS;
    }
    ax_runtime::telemetry::init_tracing(&cli.config.log);
    match commands::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
