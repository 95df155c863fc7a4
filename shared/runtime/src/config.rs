//! The one configuration of every `ax` subcommand.
//!
//! Each setting is a long flag with an `AX_…` environment variable and a loopback
//! default. A TOML file (`--config FILE` or `AX_CONFIG`) may set any of them by the
//! flag's name with underscores (`mysql_url = "…"`). Precedence: flag, then
//! environment, then file, then default. Values are validated before anything
//! connects, and a bad one is reported with the variable that carried it.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use ax_domain::subjects::{is_valid_namespace, Names};

/// A URL that may carry a password: `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The full URL, password included; only for handing to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn redacted(&self) -> String {
        // scheme://user:password@host → scheme://user:***@host
        let Some((scheme, rest)) = self.0.split_once("://") else { return self.0.clone() };
        let Some((auth, host)) = rest.rsplit_once('@') else { return self.0.clone() };
        match auth.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => self.0.clone(),
        }
    }
}

impl FromStr for SecretUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains("://") {
            Ok(Self(s.to_owned()))
        } else {
            Err("expected a URL like scheme://host:port".into())
        }
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// A duration written `250ms`, `10s`, `5m` or `1h`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a duration like 500ms, 10s, 5m or 1h"))?;
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            _ => return Err(format!("{s:?} needs a unit: ms, s, m or h")),
        };
        Ok(Span(d))
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

fn parse_namespace(s: &str) -> Result<String, String> {
    if is_valid_namespace(s) {
        Ok(s.to_owned())
    } else {
        Err("must match [a-z0-9_]{1,32}".into())
    }
}

fn parse_tags(s: &str) -> Result<String, String> {
    for tag in s.split(',').filter(|t| !t.is_empty()) {
        if tag.len() > 64 || tag.contains(char::is_whitespace) {
            return Err(format!("tag {tag:?} must be 1 to 64 characters without spaces"));
        }
    }
    Ok(s.to_owned())
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "MySQL (the authoritative store)")]
pub struct MysqlConfig {
    /// MySQL or MariaDB URL; the database is created if missing.
    #[arg(long, global = true, env = "AX_MYSQL_URL", default_value = "mysql://root@127.0.0.1:3306/ax", hide_env_values = true)]
    pub mysql_url: SecretUrl,
    /// Connections in each process's pool.
    #[arg(long, global = true, env = "AX_MYSQL_MAX_CONNECTIONS", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub mysql_max_connections: u32,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Redis (queues and guards)")]
pub struct RedisConfig {
    #[arg(long, global = true, env = "AX_REDIS_URL", default_value = "redis://127.0.0.1:6379", hide_env_values = true)]
    pub redis_url: SecretUrl,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "NATS (events, triggers, worker RPC)")]
pub struct NatsConfig {
    #[arg(long, global = true, env = "AX_NATS_URL", default_value = "nats://127.0.0.1:4222", hide_env_values = true)]
    pub nats_url: SecretUrl,
    /// Root of every subject, Redis key and stream-name suffix; installations with
    /// different namespaces share servers without seeing each other.
    #[arg(long, global = true, env = "AX_NAMESPACE", default_value = "ax", value_parser = parse_namespace)]
    pub namespace: String,
}

impl NatsConfig {
    pub fn names(&self) -> Names {
        Names::new(&self.namespace)
    }
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "HTTP")]
pub struct HttpConfig {
    /// Where `ax api` (and `ax dev`) listen.
    #[arg(long, global = true, env = "AX_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Where CLI commands reach the api.
    #[arg(long, global = true, env = "AX_API_URL", default_value = "http://127.0.0.1:8080")]
    pub api_url: String,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Scheduler")]
pub struct SchedulerConfig {
    /// How long a worker holds an instance without renewing; also how long a
    /// silent worker counts as alive.
    #[arg(long, global = true, env = "AX_LEASE", default_value = "30s")]
    pub lease: Span,
    /// How often the dispatcher looks for due work when nothing woke it.
    #[arg(long, global = true, env = "AX_DISPATCH_INTERVAL", default_value = "200ms")]
    pub dispatch_interval: Span,
    /// How often the outbox relay looks for unpublished events when nothing woke it.
    #[arg(long, global = true, env = "AX_RELAY_INTERVAL", default_value = "100ms")]
    pub relay_interval: Span,
    /// After an attempt's timeout, how long the worker has to stop it (SIGTERM, then
    /// SIGKILL for shell) before the scheduler ends the attempt itself.
    #[arg(long, global = true, env = "AX_TIMEOUT_GRACE", default_value = "10s")]
    pub timeout_grace: Span,
    /// Retries one task may start per minute before further retries are deferred.
    #[arg(long, global = true, env = "AX_RETRY_BUDGET_TASK", default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
    pub retry_budget_task: u32,
    /// Retries the whole cluster may start per minute before further ones are deferred.
    #[arg(long, global = true, env = "AX_RETRY_BUDGET_CLUSTER", default_value_t = 1200, value_parser = clap::value_parser!(u32).range(1..))]
    pub retry_budget_cluster: u32,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Worker")]
pub struct WorkerConfig {
    /// Defaults to a generated `wkr_…` id.
    #[arg(long, global = true, env = "AX_WORKER_ID")]
    pub worker_id: Option<String>,
    #[arg(long, global = true, env = "AX_WORKER_GROUP", default_value = "default")]
    pub group: String,
    /// Comma-separated; a task with `dispatch.tags` only goes to workers carrying all of them.
    #[arg(long, global = true, env = "AX_WORKER_TAGS", default_value = "", value_parser = parse_tags)]
    pub tags: String,
    /// Instances this worker runs at once.
    #[arg(long, global = true, env = "AX_WORKER_MAX_RUNNING", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_running: u32,
    /// Assignments taken ahead of a free slot, so the next one is at hand when a
    /// handler ends (the scheduler counts them against this worker). Their leases
    /// are renewed like running ones. 0 keeps a worker from holding work it cannot
    /// start yet, which suits long jobs; short jobs run faster with it at
    /// `max_running`.
    #[arg(long, global = true, env = "AX_WORKER_PREFETCH", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub prefetch: u32,
    #[arg(long, global = true, env = "AX_HEARTBEAT_INTERVAL", default_value = "10s")]
    pub heartbeat_interval: Span,
    /// On shutdown, how long running attempts may take to finish before they are
    /// cancelled and handed back.
    #[arg(long, global = true, env = "AX_WORKER_DRAIN", default_value = "30s")]
    pub drain: Span,
}

impl WorkerConfig {
    pub fn tag_list(&self) -> Vec<String> {
        self.tags.split(',').filter(|t| !t.is_empty()).map(str::to_owned).collect()
    }
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Logging")]
pub struct LogConfig {
    /// A tracing filter, e.g. `info` or `ax_scheduler=debug,info`.
    #[arg(long, global = true, env = "AX_LOG", default_value = "info")]
    pub log: String,
    /// `text` or `json`.
    #[arg(long, global = true, env = "AX_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Everything, flattened into every subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct Config {
    /// A TOML file with any of these settings (keys are the flag names with underscores).
    #[arg(long, global = true, env = "AX_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub mysql: MysqlConfig,
    #[command(flatten)]
    pub redis: RedisConfig,
    #[command(flatten)]
    pub nats: NatsConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub scheduler: SchedulerConfig,
    #[command(flatten)]
    pub worker: WorkerConfig,
    #[command(flatten)]
    pub log: LogConfig,
    #[command(flatten)]
    pub observe: crate::observe::ObserveConfig,
}

/// A setting that parsed but does not make sense, named by its variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {variable}: {reason}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub reason: String,
}

impl Config {
    /// Rules that involve more than one setting.
    ///
    /// # Errors
    /// The first rule broken, naming the variable to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let scheme = |url: &SecretUrl, variable: &'static str, schemes: &[&str]| {
            let ok = schemes.iter().any(|s| url.expose().starts_with(&format!("{s}://")));
            if ok { Ok(()) } else { Err(ConfigError { variable, reason: format!("scheme must be one of {schemes:?}") }) }
        };
        scheme(&self.mysql.mysql_url, "AX_MYSQL_URL", &["mysql", "mariadb"])?;
        scheme(&self.redis.redis_url, "AX_REDIS_URL", &["redis", "rediss"])?;
        scheme(&self.nats.nats_url, "AX_NATS_URL", &["nats", "tls", "ws", "wss"])?;
        let heartbeat = self.worker.heartbeat_interval.0;
        if heartbeat.is_zero() {
            return Err(ConfigError { variable: "AX_HEARTBEAT_INTERVAL", reason: "must be above zero".into() });
        }
        if self.scheduler.lease.0 < heartbeat * 3 {
            return Err(ConfigError {
                variable: "AX_LEASE",
                reason: format!(
                    "{} is shorter than three heartbeats ({} each): one late heartbeat would make a live worker look dead",
                    self.scheduler.lease, self.worker.heartbeat_interval
                ),
            });
        }
        for (variable, span) in [("AX_DISPATCH_INTERVAL", self.scheduler.dispatch_interval), ("AX_RELAY_INTERVAL", self.scheduler.relay_interval)] {
            if span.0.is_zero() {
                return Err(ConfigError { variable, reason: "must be above zero".into() });
            }
        }
        if let Some(id) = &self.worker.worker_id {
            id.parse::<ax_domain::ids::WorkerId>()
                .map_err(|err| ConfigError { variable: "AX_WORKER_ID", reason: err.to_string() })?;
        }
        self.observe.validate()?;
        Ok(())
    }

    /// The settings as TOML, secrets redacted, for `--dump-config`.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k} = {v:?}\n"));
        line("mysql_url", self.mysql.mysql_url.to_string());
        line("mysql_max_connections", self.mysql.mysql_max_connections.to_string());
        line("redis_url", self.redis.redis_url.to_string());
        line("nats_url", self.nats.nats_url.to_string());
        line("namespace", self.nats.namespace.clone());
        line("http_addr", self.http.http_addr.to_string());
        line("api_url", self.http.api_url.clone());
        line("lease", self.scheduler.lease.to_string());
        line("dispatch_interval", self.scheduler.dispatch_interval.to_string());
        line("relay_interval", self.scheduler.relay_interval.to_string());
        line("timeout_grace", self.scheduler.timeout_grace.to_string());
        line("retry_budget_task", self.scheduler.retry_budget_task.to_string());
        line("retry_budget_cluster", self.scheduler.retry_budget_cluster.to_string());
        line("worker_id", self.worker.worker_id.clone().unwrap_or_default());
        line("group", self.worker.group.clone());
        line("tags", self.worker.tags.clone());
        line("max_running", self.worker.max_running.to_string());
        line("prefetch", self.worker.prefetch.to_string());
        line("heartbeat_interval", self.worker.heartbeat_interval.to_string());
        line("drain", self.worker.drain.to_string());
        line("log", self.log.log.clone());
        line("log_format", self.log.log_format.clone());
        self.observe.dump(&mut line);
        out
    }
}

// ---- the TOML file -----------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read config file {path}")]
    Read { path: String, #[source] source: std::io::Error },
    #[error("config file {path} is not valid TOML: {reason}")]
    Parse { path: String, reason: String },
    #[error("config file {path}: unknown setting {key:?}")]
    UnknownKey { path: String, key: String },
    #[error("config file {path}: setting {key:?} must be a string, number or boolean")]
    BadValue { path: String, key: String },
}

/// Finds `--config FILE` (or `AX_CONFIG`) and makes the file's settings the
/// defaults of `command`, so that flags and environment variables still win.
///
/// # Errors
/// An unreadable file, invalid TOML, or a key that names no setting.
pub fn apply_config_file(command: clap::Command, args: &[String]) -> Result<clap::Command, FileError> {
    let mut path = std::env::var("AX_CONFIG").ok().filter(|p| !p.is_empty());
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--config" {
            path = iter.next().cloned();
        } else if let Some(p) = arg.strip_prefix("--config=") {
            path = Some(p.to_owned());
        }
    }
    let Some(path) = path else { return Ok(command) };
    let text = std::fs::read_to_string(&path).map_err(|source| FileError::Read { path: path.clone(), source })?;
    let table: toml::Table = text.parse().map_err(|err: toml::de::Error| FileError::Parse { path: path.clone(), reason: err.to_string() })?;
    let mut command = command;
    for (key, value) in table {
        let long = key.replace('_', "-");
        let id = command.get_arguments().find(|a| a.get_long() == Some(long.as_str())).map(|a| a.get_id().clone());
        let Some(id) = id.filter(|_| long != "config") else {
            return Err(FileError::UnknownKey { path: path.clone(), key });
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(FileError::BadValue { path: path.clone(), key }),
        };
        command = command.mut_arg(id, |arg| arg.default_value(value));
    }
    Ok(command)
}

/// Rewrites a clap error about a bad value so it names the environment variable
/// the value may have come from.
pub fn name_the_variable(command: &clap::Command, err: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(err.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return err;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else { return err };
    let long = arg.trim_start_matches("--").split([' ', '=']).next().unwrap_or_default();
    let env = find_env(command, long);
    match env {
        Some(env) => {
            let message = err.render().to_string();
            let message = message.trim_start_matches("error: ").trim_end().to_owned();
            clap::Error::raw(ErrorKind::ValueValidation, format!("invalid {env}: {message}\n"))
        }
        None => err,
    }
}

fn find_env(command: &clap::Command, long: &str) -> Option<String> {
    for arg in command.get_arguments() {
        if arg.get_long() == Some(long) {
            return arg.get_env().map(|e| e.to_string_lossy().into_owned());
        }
    }
    command.get_subcommands().find_map(|sub| find_env(sub, long))
}

/// Every environment variable a command reads, for the uniqueness test.
pub fn env_vars(command: &clap::Command) -> Vec<String> {
    let mut out: Vec<String> =
        command.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect();
    for sub in command.get_subcommands() {
        for var in env_vars(sub) {
            out.push(var);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        let args: Vec<String> = std::iter::once("ax").chain(args.iter().copied()).map(str::to_owned).collect();
        let command = apply_config_file(Cli::command(), &args).map_err(|e| e.to_string())?;
        let matches = command.clone().try_get_matches_from(&args).map_err(|e| name_the_variable(&command, e).to_string())?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        cli.config.validate().map_err(|e| e.to_string())?;
        Ok(cli.config)
    }

    #[test]
    fn defaults_point_at_local_services() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.nats.nats_url.expose(), "nats://127.0.0.1:4222");
        assert_eq!(config.scheduler.lease.0, Duration::from_secs(30));
        assert_eq!(config.worker.heartbeat_interval.0, Duration::from_secs(10));
    }

    #[test]
    fn a_lease_under_three_heartbeats_is_refused_by_name() {
        let err = parse(&["--lease", "20s"]).unwrap_err();
        assert!(err.contains("AX_LEASE"), "{err}");
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let err = parse(&["--heartbeat-interval", "soon"]).unwrap_err();
        assert!(err.contains("AX_HEARTBEAT_INTERVAL"), "{err}");
        let err = parse(&["--namespace", "Bad.Name"]).unwrap_err();
        assert!(err.contains("AX_NAMESPACE"), "{err}");
    }

    #[test]
    fn the_file_sets_defaults_and_flags_win() {
        let dir = std::env::temp_dir().join(format!("ax-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ax.toml");
        std::fs::write(&file, "namespace = \"from_file\"\nlease = \"60s\"\nmax_running = 3\n").unwrap();
        let path = file.to_str().unwrap();
        let config = parse(&["--config", path, "--max-running", "5"]).unwrap();
        assert_eq!(config.nats.namespace, "from_file");
        assert_eq!(config.scheduler.lease.0, Duration::from_secs(60));
        assert_eq!(config.worker.max_running, 5);
        std::fs::write(&file, "nonsense = 1\n").unwrap();
        let err = parse(&["--config", path]).unwrap_err();
        assert!(err.contains("nonsense"), "{err}");
    }

    #[test]
    fn secrets_never_display() {
        let url: SecretUrl = "mysql://ax:hunter2@db:3306/ax".parse().unwrap();
        assert_eq!(url.to_string(), "mysql://ax:***@db:3306/ax");
        assert!(!format!("{url:?}").contains("hunter2"));
    }

    #[test]
    fn every_variable_is_unique_and_prefixed() {
        let vars = env_vars(&Cli::command());
        let mut seen = std::collections::HashSet::new();
        for var in &vars {
            assert!(var.starts_with("AX_"), "{var}");
            assert!(seen.insert(var.clone()), "{var} is used twice");
        }
        assert!(vars.len() >= 15);
    }
}
