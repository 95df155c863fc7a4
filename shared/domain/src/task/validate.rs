//! Rules that serde cannot express. Each check names the field it rejects.

use std::fmt;

use super::definition::*;
use crate::cron_expr::CronSchedule;

/// One problem with a definition: the dotted path of the field (`triggers[0].cron`)
/// and why it was refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }

    pub(crate) fn from_serde(err: serde_path_to_error::Error<serde_json::Error>) -> Self {
        let path = err.path().to_string();
        let field = if path == "." || path == "?" { String::new() } else { path };
        let inner = err.into_inner();
        // serde_json appends " at line L column C"; the path already says where.
        let reason = inner.to_string();
        let reason = match reason.rfind(" at line ") {
            Some(at) => reason[..at].to_owned(),
            None => reason,
        };
        Self { field, reason }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl std::error::Error for FieldError {}

/// Task names are NATS subject tokens and URL segments: `[a-z0-9_-]{1,64}`.
pub fn is_valid_task_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

const MAX_TIMEOUT_SEC: u64 = 7 * 24 * 3600;
const MAX_DELAY_SEC: u64 = 366 * 24 * 3600;
const MAX_ATTEMPTS: u32 = 100;
const MAX_SHARDS: u32 = 1024;

impl TaskDefinition {
    /// Checks every rule serde cannot.
    ///
    /// # Errors
    /// The first violated rule, naming its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !is_valid_task_name(&self.task_name) {
            return Err(FieldError::new("task_name", "must match [a-z0-9_-]{1,64}"));
        }
        if !is_valid_task_name(&self.task_type) {
            return Err(FieldError::new("task_type", "must match [a-z0-9_-]{1,64}"));
        }
        if self.owner.trim().is_empty() || self.owner.len() > 128 {
            return Err(FieldError::new("owner", "must be 1 to 128 characters, not blank"));
        }
        if self.description.as_ref().is_some_and(|d| d.len() > 4096) {
            return Err(FieldError::new("description", "must be at most 4096 characters"));
        }
        for (index, trigger) in self.triggers.iter().enumerate() {
            validate_trigger(&self.task_name, trigger, index)?;
        }
        validate_execution(&self.execution)?;
        if self.concurrency.max_running_instances == Some(0) {
            return Err(FieldError::new(
                "concurrency.max_running_instances",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        for (index, tag) in self.dispatch.tags.iter().enumerate() {
            if tag.is_empty() || tag.len() > 64 || tag.contains(char::is_whitespace) || tag.contains(',') {
                return Err(FieldError::new(
                    format!("dispatch.tags[{index}]"),
                    "must be 1 to 64 characters without spaces or commas",
                ));
            }
        }
        if let Some(sharding) = &self.dispatch.sharding
            && !(1..=MAX_SHARDS).contains(&sharding.total)
        {
            return Err(FieldError::new("dispatch.sharding.total", format!("must be 1 to {MAX_SHARDS}")));
        }
        if self.schema_version == 0 {
            return Err(FieldError::new("schema_version", "must be at least 1"));
        }
        if let Some(version) = &self.min_worker_version
            && WorkerVersion::parse(version).is_none()
        {
            return Err(FieldError::new("min_worker_version", "must be a version like 1.4 or 1.4.2"));
        }
        Ok(())
    }
}

fn validate_trigger(task_name: &str, trigger: &TriggerSpec, index: usize) -> Result<(), FieldError> {
    let at = |field: &str| format!("triggers[{index}].{field}");
    match trigger {
        TriggerSpec::Cron { cron, timezone, misfire_limit, .. } => {
            CronSchedule::parse(cron, timezone).map_err(|err| FieldError::new(at(err.field()), err.to_string()))?;
            if !(1..=10_000).contains(misfire_limit) {
                return Err(FieldError::new(at("misfire_limit"), "must be 1 to 10000"));
            }
        }
        TriggerSpec::Delay { delay_sec } => {
            if !(1..=MAX_DELAY_SEC).contains(delay_sec) {
                return Err(FieldError::new(at("delay_sec"), format!("must be 1 to {MAX_DELAY_SEC} seconds")));
            }
        }
        TriggerSpec::Chain { after, .. } => {
            if !is_valid_task_name(after) {
                return Err(FieldError::new(at("after"), "must be a task name ([a-z0-9_-]{1,64})"));
            }
            if after == task_name {
                return Err(FieldError::new(at("after"), format!("a task cannot chain after itself ({task_name} -> {task_name})")));
            }
        }
        TriggerSpec::Event { .. } => {}
    }
    Ok(())
}

fn validate_execution(execution: &Execution) -> Result<(), FieldError> {
    let handler = &execution.handler;
    if handler.is_empty() || handler.len() > 255 || handler.contains(char::is_whitespace) {
        return Err(FieldError::new("execution.handler", "must be 1 to 255 characters without spaces"));
    }
    if !execution.config.is_object() {
        return Err(FieldError::new("execution.config", "must be a JSON object"));
    }
    if handler == "shell" {
        match execution.config.get("command") {
            Some(serde_json::Value::String(command)) if !command.trim().is_empty() => {}
            _ => {
                return Err(FieldError::new(
                    "execution.config.command",
                    "the shell handler needs a non-empty command string",
                ))
            }
        }
    }
    if handler == "http" {
        match execution.config.get("url") {
            Some(serde_json::Value::String(url)) if url.starts_with("http://") => {}
            Some(serde_json::Value::String(url)) if url.starts_with("https://") => {
                return Err(FieldError::new(
                    "execution.config.url",
                    "the built-in http handler speaks plain http only; reach https through a local proxy or an SDK handler",
                ))
            }
            _ => return Err(FieldError::new("execution.config.url", "the http handler needs an http:// URL")),
        }
    }
    if !(1..=MAX_TIMEOUT_SEC).contains(&execution.timeout) {
        return Err(FieldError::new("execution.timeout", format!("must be 1 to {MAX_TIMEOUT_SEC} seconds")));
    }
    let retry = &execution.retry;
    if !(1..=MAX_ATTEMPTS).contains(&retry.max_attempts) {
        return Err(FieldError::new("execution.retry.max_attempts", format!("must be 1 to {MAX_ATTEMPTS}")));
    }
    if retry.initial_interval_sec == 0 {
        return Err(FieldError::new("execution.retry.initial_interval_sec", "must be at least 1"));
    }
    if retry.max_interval_sec < retry.initial_interval_sec {
        return Err(FieldError::new(
            "execution.retry.max_interval_sec",
            "must be at least initial_interval_sec",
        ));
    }
    if !(0.0..=1.0).contains(&retry.jitter) {
        return Err(FieldError::new("execution.retry.jitter", "must be between 0.0 and 1.0"));
    }
    Ok(())
}

/// A worker version (`major.minor[.patch]`), compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkerVersion(pub u32, pub u32, pub u32);

impl WorkerVersion {
    pub fn parse(value: &str) -> Option<Self> {
        let core = value.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = match parts.next() {
            Some(p) => p?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self(major, minor, patch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "task_name": "order_sync",
            "owner": "data_team",
            "execution": {"handler": "noop"}
        })
    }

    fn error_of(value: serde_json::Value) -> FieldError {
        TaskDefinition::from_json(value.to_string().as_bytes()).unwrap_err()
    }

    #[test]
    fn the_seed_example_is_accepted_with_every_field() {
        let def = TaskDefinition::from_json(
            br#"{
              "task_name": "order_sync", "task_type": "batch", "owner": "data_team",
              "triggers": [ { "type": "cron", "cron": "0 2 * * *", "timezone": "Asia/Shanghai" } ],
              "execution": { "handler": "com.ax.handler.OrderSyncHandler", "timeout": 1800,
                "retry": { "max_attempts": 3, "backoff": "exp", "initial_interval_sec": 30 } },
              "concurrency": { "max_running_instances": 1, "blocking_strategy": "serial" },
              "dispatch": { "strategy": "hash", "tags": ["data-node-a", "data-node-b"] }
            }"#,
        )
        .unwrap();
        assert_eq!(def.execution.retry.backoff, Backoff::Exp);
        assert_eq!(def.execution.retry.max_interval_sec, 1800);
        assert_eq!(def.dispatch.strategy, DispatchStrategy::Hash);
        assert_eq!(def.concurrency.max_running_instances, Some(1));
        assert_eq!(def.schema_version, 1);
    }

    #[test]
    fn defaults_are_filled_in() {
        let def = TaskDefinition::from_json(base().to_string().as_bytes()).unwrap();
        assert_eq!(def.task_type, "batch");
        assert_eq!(def.execution.timeout, 3600);
        assert_eq!(def.execution.retry.max_attempts, 1);
        assert_eq!(def.concurrency.blocking_strategy, BlockingStrategy::Serial);
        assert_eq!(def.dispatch.strategy, DispatchStrategy::LeastRunning);
        assert_eq!(def.priority, Priority::Normal);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(&str, serde_json::Value)> = vec![
            ("task_name", serde_json::json!({"task_name": "Order Sync"})),
            ("owner", serde_json::json!({"owner": "  "})),
            ("execution.retry.backoff", serde_json::json!({"execution": {"handler": "noop", "retry": {"backoff": "cubic"}}})),
            ("execution.retry.max_attempts", serde_json::json!({"execution": {"handler": "noop", "retry": {"max_attempts": 0}}})),
            ("execution.retry.max_interval_sec", serde_json::json!({"execution": {"handler": "noop", "retry": {"initial_interval_sec": 60, "max_interval_sec": 10}}})),
            ("execution.timeout", serde_json::json!({"execution": {"handler": "noop", "timeout": 0}})),
            ("execution.config.command", serde_json::json!({"execution": {"handler": "shell"}})),
            ("concurrency.blocking_strategy", serde_json::json!({"concurrency": {"blocking_strategy": "queue"}})),
            ("concurrency.max_running_instances", serde_json::json!({"concurrency": {"max_running_instances": 0}})),
            ("dispatch.strategy", serde_json::json!({"dispatch": {"strategy": "random"}})),
            ("dispatch.tags[1]", serde_json::json!({"dispatch": {"tags": ["ok", "not ok"]}})),
            ("triggers[0].cron", serde_json::json!({"triggers": [{"type": "cron", "cron": "61 * * * *"}]})),
            ("triggers[0].timezone", serde_json::json!({"triggers": [{"type": "cron", "cron": "0 2 * * *", "timezone": "Mars/Olympus"}]})),
            ("triggers[0].type", serde_json::json!({"triggers": [{"type": "sometimes"}]})),
            ("triggers[0].after", serde_json::json!({"triggers": [{"type": "chain", "after": "order_sync"}]})),
            ("triggers[0].delay_sec", serde_json::json!({"triggers": [{"type": "delay", "delay_sec": 0}]})),
            ("min_worker_version", serde_json::json!({"min_worker_version": "latest"})),
            ("schema_version", serde_json::json!({"schema_version": 0})),
        ];
        for (field, patch) in cases {
            let mut value = base();
            for (k, v) in patch.as_object().unwrap() {
                value[k] = v.clone();
            }
            let err = error_of(value);
            assert!(err.field.starts_with(field), "expected {field}, got {err:?}");
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let mut value = base();
        value["execution"]["retries"] = serde_json::json!(3);
        let err = error_of(value);
        assert_eq!(err.field, "execution.retries");
        assert!(err.reason.contains("retries"), "{err:?}");
    }

    #[test]
    fn worker_versions_compare_numerically() {
        assert!(WorkerVersion::parse("1.10").unwrap() > WorkerVersion::parse("1.9.9").unwrap());
        assert_eq!(WorkerVersion::parse("2.0.1-rc1"), Some(WorkerVersion(2, 0, 1)));
        assert!(WorkerVersion::parse("2").is_none());
    }
}
