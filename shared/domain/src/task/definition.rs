//! The serde model of a task definition. Field names and enumeration spellings are the
//! public contract (seed 3.1, DESIGN.md); `schema/task.schema.json` mirrors them.

use serde::{Deserialize, Serialize};

use super::validate::FieldError;

/// A task as registered: every field of seed 3.1 plus the ones AX adds
/// (`schema_version`, `min_worker_version`, `priority`, `execution.config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskDefinition {
    /// `[a-z0-9_-]{1,64}`; also a NATS subject token.
    pub task_name: String,
    #[serde(default = "default_task_type")]
    pub task_type: String,
    /// Who is paged when it fails; every task needs one (seed 6).
    pub owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub triggers: Vec<TriggerSpec>,
    pub execution: Execution,
    #[serde(default)]
    pub concurrency: Concurrency,
    #[serde(default)]
    pub dispatch: Dispatch,
    /// The params layout this task's handler understands; a trigger carrying another
    /// `payload_version` is rejected, never executed (seed 3.2).
    #[serde(default = "one")]
    pub schema_version: u32,
    /// Only workers at or above this version receive the task (seed 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_worker_version: Option<String>,
    /// Default queue level of this task's instances; a trigger may override it.
    #[serde(default)]
    pub priority: Priority,
}

/// When a task fires, besides direct triggers over HTTP and `ax.trigger.<task>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TriggerSpec {
    Cron {
        /// 5-field crontab, or 6/7 fields with seconds (and year).
        cron: String,
        /// IANA zone the expression is read in.
        #[serde(default = "utc")]
        timezone: String,
        #[serde(default)]
        misfire: MisfirePolicy,
        /// Upper bound on catch-up fires with `misfire: fire_all`.
        #[serde(default = "default_misfire_limit")]
        misfire_limit: u32,
    },
    Delay {
        /// Every firing of this task becomes due this long after its trigger.
        delay_sec: u64,
    },
    Chain {
        /// The upstream task whose instances fire this one.
        after: String,
        #[serde(default)]
        on: ChainOn,
    },
    Event {
        /// Where upstream systems send the event from.
        #[serde(default)]
        source: EventSource,
    },
}

impl TriggerSpec {
    pub fn kind(&self) -> TriggerKind {
        match self {
            TriggerSpec::Cron { .. } => TriggerKind::Cron,
            TriggerSpec::Delay { .. } => TriggerKind::Delay,
            TriggerSpec::Chain { .. } => TriggerKind::Chain,
            TriggerSpec::Event { .. } => TriggerKind::Event,
        }
    }
}

/// How an instance came to be; stored on the instance and carried by its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    Cron,
    Delay,
    Chain,
    Event,
    /// An operator through the API or CLI (run now, rerun, backfill).
    Manual,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Cron => "cron",
            TriggerKind::Delay => "delay",
            TriggerKind::Chain => "chain",
            TriggerKind::Event => "event",
            TriggerKind::Manual => "manual",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "cron" => TriggerKind::Cron,
            "delay" => TriggerKind::Delay,
            "chain" => TriggerKind::Chain,
            "event" => TriggerKind::Event,
            "manual" => TriggerKind::Manual,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// One catch-up instance for any number of missed fires.
    #[default]
    FireOnce,
    Skip,
    /// Every missed fire, up to `misfire_limit`.
    FireAll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainOn {
    #[default]
    Succeeded,
    Failed,
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    #[default]
    Any,
    Http,
    Nats,
}

/// What runs and how failures are handled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    /// The handler name a worker registered (`shell`, `noop`, or an SDK handler).
    pub handler: String,
    /// Handler-specific settings, e.g. `{"command": "…"}` for `shell`.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// Seconds an attempt may run before it is cancelled.
    #[serde(default = "default_timeout")]
    pub timeout: u64,
    #[serde(default)]
    pub retry: RetryPolicy,
}

/// Seed 3.4. `max_attempts` counts every attempt, the first included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default = "one")]
    pub max_attempts: u32,
    #[serde(default)]
    pub backoff: Backoff,
    #[serde(default = "default_initial_interval")]
    pub initial_interval_sec: u64,
    #[serde(default = "default_max_interval")]
    pub max_interval_sec: u64,
    /// Fraction (0.0–1.0) of each interval drawn at random, so retries of many
    /// instances that failed together do not come back together.
    #[serde(default)]
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::default(),
            initial_interval_sec: default_initial_interval(),
            max_interval_sec: default_max_interval(),
            jitter: 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    Fixed,
    Linear,
    #[default]
    Exp,
}

/// Seed 4.1, first layer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    /// Unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running_instances: Option<u32>,
    #[serde(default)]
    pub blocking_strategy: BlockingStrategy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockingStrategy {
    /// New instances wait, FIFO.
    #[default]
    Serial,
    /// New instances are recorded as discarded.
    Discard,
    /// The running instance is cancelled and the new one runs.
    Replace,
}

/// Seed 4.4: which worker gets an instance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatch {
    #[serde(default)]
    pub strategy: DispatchStrategy,
    /// A worker must carry every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<Sharding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchStrategy {
    #[default]
    LeastRunning,
    Hash,
    Broadcast,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sharding {
    pub total: u32,
}

/// How one firing of a task splits into shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardPlan {
    /// `sharding.total` shards, each to a different worker while enough exist.
    Fixed(u32),
    /// `broadcast` without `sharding`: one shard per eligible worker at dispatch time.
    PerWorker,
}

impl Dispatch {
    /// `None` when a firing runs as one instance on one worker.
    pub fn shard_plan(&self) -> Option<ShardPlan> {
        match (&self.sharding, self.strategy) {
            (Some(sharding), _) => Some(ShardPlan::Fixed(sharding.total)),
            (None, DispatchStrategy::Broadcast) => Some(ShardPlan::PerWorker),
            (None, _) => None,
        }
    }
}

/// Seed 4.2: the queue level an instance waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Urgent,
    #[default]
    Normal,
    Low,
}

impl Priority {
    /// Stored as a small number so `ORDER BY priority` takes urgent first.
    pub fn rank(self) -> u8 {
        match self {
            Priority::Urgent => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        }
    }

    pub fn from_rank(rank: u8) -> Option<Self> {
        Some(match rank {
            0 => Priority::Urgent,
            1 => Priority::Normal,
            2 => Priority::Low,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Urgent => "urgent",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

impl TaskDefinition {
    /// Parses and validates a definition.
    ///
    /// # Errors
    /// The first problem found, with the dotted path of the field (`execution.retry.backoff`).
    pub fn from_json(json: &[u8]) -> Result<Self, FieldError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let definition: TaskDefinition =
            serde_path_to_error::deserialize(&mut de).map_err(FieldError::from_serde)?;
        de.end().map_err(|err| FieldError::new("", format!("trailing characters: {err}")))?;
        definition.validate()?;
        Ok(definition)
    }

    /// The definition as stored and served: canonical JSON with defaults filled in.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a task definition always serializes")
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.execution.timeout)
    }
}

fn default_task_type() -> String {
    "batch".to_owned()
}
fn utc() -> String {
    "UTC".to_owned()
}
fn one() -> u32 {
    1
}
fn default_misfire_limit() -> u32 {
    100
}
fn default_timeout() -> u64 {
    3600
}
fn default_initial_interval() -> u64 {
    30
}
fn default_max_interval() -> u64 {
    1800
}
fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}
