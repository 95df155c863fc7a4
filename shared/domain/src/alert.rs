//! Alert rules and notification channels (seed 5.4), as operators write them.
//!
//! A rule watches one condition at one level: P0 (mass failure, every worker lost),
//! P1 (a task failing N times in a row, a high timeout rate), P2 (backlog, runs far
//! slower than usual). A channel is a webhook in one of the formats chat tools
//! accept. Both arrive as JSON, are validated here with the field at fault named,
//! and are stored as their canonical JSON with every default filled in.

use serde::{Deserialize, Serialize};

use crate::task::{is_valid_task_name, FieldError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlertLevel {
    /// Mass failure or every worker lost: page someone now.
    P0,
    /// One task in trouble: its owner in the group chat.
    P1,
    /// Something to look at: backlog, jitter.
    P2,
}

impl AlertLevel {
    pub const ALL: [AlertLevel; 3] = [AlertLevel::P0, AlertLevel::P1, AlertLevel::P2];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertLevel::P0 => "P0",
            AlertLevel::P1 => "P1",
            AlertLevel::P2 => "P2",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str().eq_ignore_ascii_case(value))
    }
}

impl std::fmt::Display for AlertLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The conditions the monitor can watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// The task's latest `threshold` finished instances all failed. Clears on a success.
    ConsecutiveFailures,
    /// Attempts ended by a timeout / attempts ended, over `window_sec`, at least
    /// `min_samples` attempts, above `threshold` (0–1).
    TimeoutRate,
    /// Failed / finished instances over `window_sec`, at least `min_samples`, above `threshold`.
    FailureRate,
    /// Fewer than `threshold` live workers (1: every worker lost).
    WorkersLost,
    /// At least `threshold` instances ready to run for longer than `window_sec`.
    Backlog,
    /// A run took more than `threshold` × the p95 of the task's previous
    /// `min_samples` (or more) runs. Clears on the next normal run.
    DurationOutlier,
}

impl RuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::ConsecutiveFailures => "consecutive_failures",
            RuleKind::TimeoutRate => "timeout_rate",
            RuleKind::FailureRate => "failure_rate",
            RuleKind::WorkersLost => "workers_lost",
            RuleKind::Backlog => "backlog",
            RuleKind::DurationOutlier => "duration_outlier",
        }
    }

    /// (level, threshold, window_sec, min_samples) when the rule leaves them out.
    pub fn defaults(self) -> (AlertLevel, f64, u64, u32) {
        match self {
            RuleKind::ConsecutiveFailures => (AlertLevel::P1, 3.0, 0, 0),
            RuleKind::TimeoutRate => (AlertLevel::P1, 0.2, 900, 5),
            RuleKind::FailureRate => (AlertLevel::P0, 0.5, 600, 20),
            RuleKind::WorkersLost => (AlertLevel::P0, 1.0, 0, 0),
            RuleKind::Backlog => (AlertLevel::P2, 1.0, 300, 0),
            RuleKind::DurationOutlier => (AlertLevel::P2, 3.0, 0, 20),
        }
    }

    /// Whether the monitor judges it when an instance finishes (otherwise on its
    /// periodic pass).
    pub fn on_event(self) -> bool {
        matches!(self, RuleKind::ConsecutiveFailures | RuleKind::DurationOutlier)
    }
}

pub const DEFAULT_SILENCE_SEC: u64 = 1800;
const MAX_SILENCE_SEC: u64 = 7 * 24 * 3600;
const MAX_WINDOW_SEC: u64 = 7 * 24 * 3600;

/// One alert rule. Optional fields take the kind's defaults on parsing, so a stored
/// rule always says exactly what it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    /// `[a-z0-9_-]{1,64}`; the rule's key.
    pub name: String,
    pub kind: RuleKind,
    #[serde(default)]
    pub level: Option<AlertLevel>,
    /// Only this task; every task when absent (each task is its own condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(default)]
    pub window_sec: Option<u64>,
    #[serde(default)]
    pub min_samples: Option<u32>,
    /// After a notification, the same condition (rule and task) notifies again only
    /// once this many seconds have passed, however often it fires meanwhile.
    #[serde(default = "default_silence")]
    pub silence_sec: u64,
    /// Channel names; empty sends to every channel that takes the rule's level.
    #[serde(default)]
    pub channels: Vec<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn default_silence() -> u64 {
    DEFAULT_SILENCE_SEC
}
fn yes() -> bool {
    true
}

impl AlertRule {
    /// Parses, validates and fills the kind's defaults.
    ///
    /// # Errors
    /// The first problem, with the field named.
    pub fn from_json(json: &[u8]) -> Result<Self, FieldError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let rule: AlertRule = serde_path_to_error::deserialize(&mut de).map_err(FieldError::from_serde)?;
        de.end().map_err(|err| FieldError::new("", format!("trailing characters: {err}")))?;
        let rule = rule.normalized();
        rule.validate()?;
        Ok(rule)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a rule always serializes")
    }

    fn normalized(mut self) -> Self {
        let (level, threshold, window, samples) = self.kind.defaults();
        self.level.get_or_insert(level);
        self.threshold.get_or_insert(threshold);
        self.window_sec.get_or_insert(window);
        self.min_samples.get_or_insert(samples);
        self
    }

    pub fn level(&self) -> AlertLevel {
        self.level.unwrap_or(self.kind.defaults().0)
    }
    pub fn threshold(&self) -> f64 {
        self.threshold.unwrap_or(self.kind.defaults().1)
    }
    pub fn window_sec(&self) -> u64 {
        self.window_sec.unwrap_or(self.kind.defaults().2)
    }
    pub fn min_samples(&self) -> u32 {
        self.min_samples.unwrap_or(self.kind.defaults().3)
    }

    /// Whether this rule watches `task`.
    pub fn applies_to(&self, task: &str) -> bool {
        self.task.as_deref().is_none_or(|t| t == task)
    }

    /// # Errors
    /// The first rule broken, naming its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !is_valid_task_name(&self.name) {
            return Err(FieldError::new("name", "must match [a-z0-9_-]{1,64}"));
        }
        if let Some(task) = &self.task {
            if !is_valid_task_name(task) {
                return Err(FieldError::new("task", "must match [a-z0-9_-]{1,64}"));
            }
            if self.kind == RuleKind::WorkersLost {
                return Err(FieldError::new("task", "workers_lost watches the whole pool; leave task out"));
            }
        }
        let threshold = self.threshold();
        let whole = |low: f64, high: f64| threshold.fract() == 0.0 && (low..=high).contains(&threshold);
        match self.kind {
            RuleKind::ConsecutiveFailures if !whole(1.0, 1000.0) => {
                return Err(FieldError::new("threshold", "a count of failures in a row, 1 to 1000"));
            }
            RuleKind::TimeoutRate | RuleKind::FailureRate if !(threshold > 0.0 && threshold <= 1.0) => {
                return Err(FieldError::new("threshold", "a rate above 0 and at most 1"));
            }
            RuleKind::WorkersLost if !whole(1.0, 100_000.0) => {
                return Err(FieldError::new("threshold", "the fewest live workers that is fine, 1 to 100000"));
            }
            RuleKind::Backlog if !whole(1.0, 10_000_000.0) => {
                return Err(FieldError::new("threshold", "a count of waiting instances, 1 or more"));
            }
            RuleKind::DurationOutlier if !(threshold > 1.0 && threshold <= 1000.0) => {
                return Err(FieldError::new("threshold", "a factor of the p95 duration, above 1 and at most 1000"));
            }
            _ => {}
        }
        let window = self.window_sec();
        if matches!(self.kind, RuleKind::TimeoutRate | RuleKind::FailureRate | RuleKind::Backlog) && !(10..=MAX_WINDOW_SEC).contains(&window) {
            return Err(FieldError::new("window_sec", format!("must be 10 to {MAX_WINDOW_SEC} seconds")));
        }
        if matches!(self.kind, RuleKind::TimeoutRate | RuleKind::FailureRate | RuleKind::DurationOutlier)
            && !(1..=100_000).contains(&self.min_samples())
        {
            return Err(FieldError::new("min_samples", "must be 1 to 100000"));
        }
        if self.silence_sec > MAX_SILENCE_SEC {
            return Err(FieldError::new("silence_sec", format!("must be at most {MAX_SILENCE_SEC} seconds")));
        }
        for (index, channel) in self.channels.iter().enumerate() {
            if !is_valid_task_name(channel) {
                return Err(FieldError::new(format!("channels[{index}]"), "a channel name, [a-z0-9_-]{1,64}"));
            }
        }
        if self.description.as_ref().is_some_and(|d| d.len() > 512) {
            return Err(FieldError::new("description", "must be at most 512 characters"));
        }
        Ok(())
    }
}

/// The body a webhook expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelFormat {
    /// AX's own JSON: every field, for programs.
    Generic,
    /// WeCom (企业微信) group robot.
    Wecom,
    /// DingTalk (钉钉) custom robot; `secret` signs the request.
    Dingtalk,
    /// Feishu / Lark custom bot; `secret` signs the request.
    Feishu,
    /// Slack incoming webhook.
    Slack,
}

impl ChannelFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelFormat::Generic => "generic",
            ChannelFormat::Wecom => "wecom",
            ChannelFormat::Dingtalk => "dingtalk",
            ChannelFormat::Feishu => "feishu",
            ChannelFormat::Slack => "slack",
        }
    }
}

/// A webhook notifications go to.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertChannel {
    pub name: String,
    pub format: ChannelFormat,
    /// `http://` or `https://`; often carries a token, so it is never shown whole.
    pub url: String,
    /// Signing secret (DingTalk, Feishu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Levels this channel takes when a rule names no channels.
    #[serde(default = "all_levels")]
    pub levels: Vec<AlertLevel>,
    /// Also receives the monthly task health report.
    #[serde(default)]
    pub reports: bool,
    /// P0 and P1 notifications mention the task's owner where the format can.
    #[serde(default = "yes")]
    pub mention_owner: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn all_levels() -> Vec<AlertLevel> {
    AlertLevel::ALL.to_vec()
}

impl std::fmt::Debug for AlertChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertChannel")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("url", &redact_url(&self.url))
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("levels", &self.levels)
            .field("reports", &self.reports)
            .finish()
    }
}

impl AlertChannel {
    /// # Errors
    /// The first problem, with the field named.
    pub fn from_json(json: &[u8]) -> Result<Self, FieldError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let channel: AlertChannel = serde_path_to_error::deserialize(&mut de).map_err(FieldError::from_serde)?;
        de.end().map_err(|err| FieldError::new("", format!("trailing characters: {err}")))?;
        channel.validate()?;
        Ok(channel)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a channel always serializes")
    }

    /// # Errors
    /// The first rule broken, naming its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !is_valid_task_name(&self.name) {
            return Err(FieldError::new("name", "must match [a-z0-9_-]{1,64}"));
        }
        let url = self.url.trim();
        let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
        match rest {
            Some(rest) if !rest.is_empty() && !rest.starts_with('/') && url.len() <= 2048 && !url.contains(char::is_whitespace) => {}
            _ => return Err(FieldError::new("url", "must be an http:// or https:// URL of at most 2048 characters")),
        }
        if self.secret.as_ref().is_some_and(|s| s.is_empty() || s.len() > 256) {
            return Err(FieldError::new("secret", "must be 1 to 256 characters"));
        }
        if self.secret.is_some() && !matches!(self.format, ChannelFormat::Dingtalk | ChannelFormat::Feishu) {
            return Err(FieldError::new("secret", "only dingtalk and feishu sign their requests"));
        }
        if self.levels.is_empty() && !self.reports {
            return Err(FieldError::new("levels", "a channel that takes no level and no report receives nothing"));
        }
        Ok(())
    }

    /// Whether a rule's notification goes here.
    pub fn takes(&self, rule: &AlertRule) -> bool {
        self.enabled
            && if rule.channels.is_empty() { self.levels.contains(&rule.level()) } else { rule.channels.contains(&self.name) }
    }
}

/// A URL with everything after the host hidden, for listings and logs: webhook
/// tokens live in paths (Slack) and query strings (DingTalk, WeCom).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "***".into() };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or_default();
    if rest.len() > host.len() {
        format!("{scheme}://{host}/***")
    } else {
        format!("{scheme}://{host}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_rule_takes_its_kinds_defaults() {
        let rule = AlertRule::from_json(br#"{"name": "failing", "kind": "consecutive_failures"}"#).unwrap();
        assert_eq!(rule.level(), AlertLevel::P1);
        assert_eq!(rule.threshold(), 3.0);
        assert_eq!(rule.silence_sec, DEFAULT_SILENCE_SEC);
        let stored = AlertRule::from_json(rule.to_json().as_bytes()).unwrap();
        assert_eq!(stored, rule);
        assert!(stored.to_json().contains("\"threshold\":3.0"));
    }

    #[test]
    fn bad_rules_name_the_field() {
        let field = |json: &str| AlertRule::from_json(json.as_bytes()).unwrap_err().field;
        assert_eq!(field(r#"{"name": "Bad", "kind": "backlog"}"#), "name");
        assert_eq!(field(r#"{"name": "r", "kind": "nonsense"}"#), "kind");
        assert_eq!(field(r#"{"name": "r", "kind": "timeout_rate", "threshold": 2}"#), "threshold");
        assert_eq!(field(r#"{"name": "r", "kind": "consecutive_failures", "threshold": 2.5}"#), "threshold");
        assert_eq!(field(r#"{"name": "r", "kind": "backlog", "window_sec": 1}"#), "window_sec");
        assert_eq!(field(r#"{"name": "r", "kind": "workers_lost", "task": "t"}"#), "task");
        assert_eq!(field(r#"{"name": "r", "kind": "backlog", "channels": ["Ops!"]}"#), "channels[0]");
        assert_eq!(field(r#"{"name": "r", "kind": "backlog", "level": "P7"}"#), "level");
        assert_eq!(field(r#"{"name": "r", "kind": "backlog", "colour": "red"}"#), "colour");
    }

    #[test]
    fn channels_are_validated_and_never_show_their_url() {
        let channel = AlertChannel::from_json(
            br#"{"name": "ops", "format": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=abc", "secret": "s3"}"#,
        )
        .unwrap();
        assert_eq!(channel.levels, AlertLevel::ALL);
        let debug = format!("{channel:?}");
        assert!(!debug.contains("abc") && !debug.contains("s3"), "{debug}");
        assert_eq!(redact_url(&channel.url), "https://oapi.dingtalk.com/***");
        let field = |json: &str| AlertChannel::from_json(json.as_bytes()).unwrap_err().field;
        assert_eq!(field(r#"{"name": "x", "format": "slack", "url": "ftp://x"}"#), "url");
        assert_eq!(field(r#"{"name": "x", "format": "slack", "url": "https://x", "secret": "s"}"#), "secret");
        assert_eq!(field(r#"{"name": "x", "format": "teams", "url": "https://x"}"#), "format");
    }

    #[test]
    fn a_rule_goes_to_its_named_channels_or_to_those_taking_its_level() {
        let rule = AlertRule::from_json(br#"{"name": "r", "kind": "backlog"}"#).unwrap();
        let p1_only = AlertChannel::from_json(br#"{"name": "p1", "format": "generic", "url": "http://h", "levels": ["P1"]}"#).unwrap();
        let all = AlertChannel::from_json(br#"{"name": "all", "format": "generic", "url": "http://h"}"#).unwrap();
        assert!(!p1_only.takes(&rule));
        assert!(all.takes(&rule));
        let named = AlertRule::from_json(br#"{"name": "r", "kind": "backlog", "channels": ["p1"]}"#).unwrap();
        assert!(p1_only.takes(&named));
        assert!(!all.takes(&named));
    }
}
