//! Settings of the event stream's consumers: the monitor (metrics, alerts, the
//! monthly health report), the log sink, and the worker SDK's log shipper. One
//! block flattened into [`Config`](crate::Config), so every subcommand accepts them
//! like any other setting.

use std::net::SocketAddr;

use crate::config::{ConfigError, Span};

#[derive(clap::Args, Debug, Clone)]
pub struct ObserveConfig {
    #[command(flatten)]
    pub monitor: MonitorConfig,
    #[command(flatten)]
    pub log_sink: LogSinkConfig,
    #[command(flatten)]
    pub worker_log: WorkerLogConfig,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Monitor, alerts and health report")]
pub struct MonitorConfig {
    /// Where `ax scheduler`, `ax worker`, `ax monitor` and `ax log-sink` serve
    /// `/metrics` and `/healthz` (the api serves them on its own address). Unset:
    /// none, except `ax monitor`, which then uses 127.0.0.1:9464.
    #[arg(long, global = true, env = "AX_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// How often the monitor refreshes its gauges (states, backlog, queues, outbox)
    /// and judges the rules that look at a time window.
    #[arg(long, global = true, env = "AX_MONITOR_INTERVAL", default_value = "15s")]
    pub monitor_interval: Span,
    /// The link to an instance's logs in notifications; `{instance_id}`, `{task}`
    /// and `{trace_id}` are filled in.
    #[arg(
        long,
        global = true,
        env = "AX_LOG_LINK",
        default_value = "http://127.0.0.1:8080/api/v1/instances/{instance_id}/logs?format=text"
    )]
    pub log_link: String,
    /// First wait before a failed webhook is tried again; it doubles up to AX_ALERT_RETRY_MAX.
    #[arg(long, global = true, env = "AX_ALERT_RETRY_INITIAL", default_value = "5s")]
    pub alert_retry_initial: Span,
    #[arg(long, global = true, env = "AX_ALERT_RETRY_MAX", default_value = "10m")]
    pub alert_retry_max: Span,
    /// Tries per notification before it is marked failed (and counted).
    #[arg(long, global = true, env = "AX_ALERT_MAX_ATTEMPTS", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub alert_max_attempts: u32,
    #[arg(long, global = true, env = "AX_ALERT_WEBHOOK_TIMEOUT", default_value = "10s")]
    pub alert_webhook_timeout: Span,
    /// When the task health report runs (cron, UTC; the default is 09:00 on the 1st
    /// of each month); `off` disables it. It covers the time since the previous run.
    #[arg(long, global = true, env = "AX_HEALTH_REPORT_CRON", default_value = "0 9 1 * *")]
    pub health_report_cron: String,
    /// The report flags a task whose latest this-many finished instances failed.
    #[arg(long, global = true, env = "AX_HEALTH_FAILURE_STREAK", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub health_failure_streak: u32,
    /// The report flags a task that has not fired for this many days.
    #[arg(long, global = true, env = "AX_HEALTH_NO_FIRE_DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub health_no_fire_days: u32,
    /// The report flags runs slower than this factor × the task's p95 duration.
    #[arg(long, global = true, env = "AX_HEALTH_DURATION_FACTOR", default_value_t = 2.0)]
    pub health_duration_factor: f64,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Log sink")]
pub struct LogSinkConfig {
    /// Whole days of task logs kept in MySQL; older days are deleted hourly.
    #[arg(long, global = true, env = "AX_LOG_RETENTION_DAYS", default_value_t = 14, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub log_retention_days: u32,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Worker task logs")]
pub struct WorkerLogConfig {
    /// Log lines a worker holds while they wait to be published; when full, new
    /// lines are dropped and counted rather than slowing the handler.
    #[arg(long, global = true, env = "AX_WORKER_LOG_BUFFER", default_value_t = 65_536, value_parser = clap::value_parser!(u32).range(16..=16_777_216))]
    pub worker_log_buffer: u32,
    /// The longest a line waits to be batched with others before it is published.
    #[arg(long, global = true, env = "AX_WORKER_LOG_FLUSH", default_value = "100ms")]
    pub worker_log_flush: Span,
}

impl MonitorConfig {
    /// The health report's schedule; `None` when it is `off`.
    pub fn health_report_schedule(&self) -> Option<ax_domain::cron_expr::CronSchedule> {
        if self.health_report_cron.trim().eq_ignore_ascii_case("off") {
            return None;
        }
        ax_domain::cron_expr::CronSchedule::parse(&self.health_report_cron, "UTC").ok()
    }

    pub fn health_settings(&self) -> ax_domain::health::HealthSettings {
        ax_domain::health::HealthSettings {
            failure_streak: self.health_failure_streak,
            no_fire_days: self.health_no_fire_days,
            duration_factor: self.health_duration_factor,
            ..Default::default()
        }
    }
}

impl ObserveConfig {
    /// # Errors
    /// The first setting that makes no sense, by its variable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let m = &self.monitor;
        let err = |variable: &'static str, reason: &str| Err(ConfigError { variable, reason: reason.to_owned() });
        if m.monitor_interval.0.is_zero() {
            return err("AX_MONITOR_INTERVAL", "must be above zero");
        }
        if !(m.log_link.starts_with("http://") || m.log_link.starts_with("https://")) {
            return err("AX_LOG_LINK", "must be an http:// or https:// URL");
        }
        if m.alert_retry_initial.0.is_zero() || m.alert_retry_max < m.alert_retry_initial {
            return err("AX_ALERT_RETRY_MAX", "AX_ALERT_RETRY_INITIAL must be above zero and at most AX_ALERT_RETRY_MAX");
        }
        if m.alert_webhook_timeout.0.is_zero() {
            return err("AX_ALERT_WEBHOOK_TIMEOUT", "must be above zero");
        }
        let off = m.health_report_cron.trim().eq_ignore_ascii_case("off");
        if let (false, Err(e)) = (off, ax_domain::cron_expr::CronSchedule::parse(&m.health_report_cron, "UTC")) {
            return Err(ConfigError { variable: "AX_HEALTH_REPORT_CRON", reason: format!("{e}; or `off`") });
        }
        if let Err(e) = m.health_settings().validate() {
            return Err(ConfigError { variable: "AX_HEALTH_DURATION_FACTOR", reason: e.to_string() });
        }
        if self.worker_log.worker_log_flush.0.is_zero() {
            return err("AX_WORKER_LOG_FLUSH", "must be above zero");
        }
        Ok(())
    }

    /// Appends `key = "value"` lines for `--dump-config`.
    pub fn dump(&self, line: &mut dyn FnMut(&str, String)) {
        let m = &self.monitor;
        line("metrics_addr", m.metrics_addr.map(|a| a.to_string()).unwrap_or_default());
        line("monitor_interval", m.monitor_interval.to_string());
        line("log_link", m.log_link.clone());
        line("alert_retry_initial", m.alert_retry_initial.to_string());
        line("alert_retry_max", m.alert_retry_max.to_string());
        line("alert_max_attempts", m.alert_max_attempts.to_string());
        line("alert_webhook_timeout", m.alert_webhook_timeout.to_string());
        line("health_report_cron", m.health_report_cron.clone());
        line("health_failure_streak", m.health_failure_streak.to_string());
        line("health_no_fire_days", m.health_no_fire_days.to_string());
        line("health_duration_factor", m.health_duration_factor.to_string());
        line("log_retention_days", self.log_sink.log_retention_days.to_string());
        line("worker_log_buffer", self.worker_log.worker_log_buffer.to_string());
        line("worker_log_flush", self.worker_log.worker_log_flush.to_string());
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::Config;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        let cli = Cli::try_parse_from(std::iter::once("ax").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        cli.config.validate().map_err(|e| e.to_string())?;
        Ok(cli.config)
    }

    #[test]
    fn defaults_are_a_monthly_report_and_two_weeks_of_logs() {
        let config = parse(&[]).unwrap();
        let schedule = config.observe.monitor.health_report_schedule().expect("a schedule by default");
        let fire = schedule.next_after(ax_domain::now()).unwrap();
        assert!(fire.to_rfc3339().contains("-01T09:00:00"), "{fire}");
        assert_eq!(config.observe.log_sink.log_retention_days, 14);
        assert!(config.dump().contains("health_report_cron = \"0 9 1 * *\""));
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let err = parse(&["--health-report-cron", "every day"]).unwrap_err();
        assert!(err.contains("AX_HEALTH_REPORT_CRON"), "{err}");
        let err = parse(&["--log-link", "console/{instance_id}"]).unwrap_err();
        assert!(err.contains("AX_LOG_LINK"), "{err}");
        let err = parse(&["--alert-retry-initial", "20m", "--alert-retry-max", "1m"]).unwrap_err();
        assert!(err.contains("AX_ALERT_RETRY_MAX"), "{err}");
        assert!(parse(&["--health-report-cron", "off"]).unwrap().observe.monitor.health_report_schedule().is_none());
    }
}
