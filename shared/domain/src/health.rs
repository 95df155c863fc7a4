//! The task health report (seed 6): once a month, every task with what needs a
//! person's attention — failing in a row, not firing, runs far slower than the
//! task's own history, a poor success rate — and whom to ask (the owner).
//!
//! Pure: the store gathers [`TaskStats`] for a period, [`report`] judges them.

use serde::{Deserialize, Serialize};

use crate::ids::InstanceId;
use crate::Timestamp;

/// What counts as unhealthy. Every threshold is a setting of the monthly run
/// (`AX_HEALTH_*`) and a parameter of the API and CLI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthSettings {
    /// A task whose latest this-many finished instances all failed is flagged.
    pub failure_streak: u32,
    /// A task that has not fired for this many days is flagged.
    pub no_fire_days: u32,
    /// A run slower than `duration_factor` × the task's p95 is an outlier.
    pub duration_factor: f64,
    /// The p95 needs at least this many earlier runs to mean anything.
    pub min_duration_samples: u32,
    /// Below this success rate (with at least `min_runs_for_rate` runs) a task is flagged.
    pub min_success_rate: f64,
    pub min_runs_for_rate: u32,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self {
            failure_streak: 3,
            no_fire_days: 7,
            duration_factor: 2.0,
            min_duration_samples: 10,
            min_success_rate: 0.9,
            min_runs_for_rate: 5,
        }
    }
}

impl HealthSettings {
    /// # Errors
    /// The first setting out of range, by its API parameter name.
    pub fn validate(&self) -> Result<(), crate::task::FieldError> {
        use crate::task::FieldError;
        if !(1..=1000).contains(&self.failure_streak) {
            return Err(FieldError::new("failure_streak", "must be 1 to 1000"));
        }
        if !(1..=3650).contains(&self.no_fire_days) {
            return Err(FieldError::new("no_fire_days", "must be 1 to 3650"));
        }
        if !(self.duration_factor > 1.0 && self.duration_factor <= 1000.0) {
            return Err(FieldError::new("duration_factor", "must be above 1 and at most 1000"));
        }
        if !(self.min_success_rate >= 0.0 && self.min_success_rate <= 1.0) {
            return Err(FieldError::new("min_success_rate", "must be 0 to 1"));
        }
        Ok(())
    }
}

/// One finished run: its instance and how long its last attempt ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub instance_id: InstanceId,
    pub finished_at: Timestamp,
    pub duration_sec: f64,
}

/// What the store knows about one task, for the period `[since, until)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskStats {
    pub task: String,
    pub owner: String,
    pub enabled: bool,
    pub registered_at: Option<Timestamp>,
    pub succeeded: u32,
    pub failed: u32,
    /// Cancelled, discarded and rejected instances finished in the period.
    pub other_finished: u32,
    /// Failed instances in a row at `until`, newest first (capped by the store).
    pub failure_streak: u32,
    /// The newest instance ever created, if any.
    pub last_fired_at: Option<Timestamp>,
    /// Successful runs, newest first, up to a few hundred, before `until`.
    pub history: Vec<Run>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthFlag {
    /// The latest `failure_streak` finished instances all failed.
    FailingInARow,
    /// No instance was ever created.
    NeverFired,
    /// The newest instance is older than `no_fire_days`.
    NotFiredRecently,
    /// Runs in the period took more than `duration_factor` × the task's p95.
    SlowRuns,
    /// Success rate in the period below `min_success_rate`.
    LowSuccessRate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHealth {
    pub task: String,
    pub owner: String,
    pub enabled: bool,
    pub runs: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// `None` without a finished success or failure in the period.
    pub success_rate: Option<f64>,
    pub failure_streak: u32,
    pub last_fired_at: Option<Timestamp>,
    pub days_since_fired: Option<f64>,
    pub p95_duration_sec: Option<f64>,
    /// The slowest outliers of the period, slowest first (at most five).
    pub slow_runs: Vec<Run>,
    pub flags: Vec<HealthFlag>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    pub generated_at: Timestamp,
    pub since: Timestamp,
    pub until: Timestamp,
    pub settings: HealthSettings,
    pub tasks_total: u32,
    pub tasks_flagged: u32,
    /// Flagged tasks first (most flags first), then by name.
    pub tasks: Vec<TaskHealth>,
}

/// The 95th percentile (nearest rank) of `values`; `None` when empty.
pub fn p95(values: &[f64]) -> Option<f64> {
    percentile(values, 0.95)
}

pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Judges each task.
pub fn report(stats: Vec<TaskStats>, settings: &HealthSettings, since: Timestamp, until: Timestamp, now: Timestamp) -> HealthReport {
    let mut tasks: Vec<TaskHealth> = stats.into_iter().map(|s| judge(s, settings, since, until, now)).collect();
    tasks.sort_by(|a, b| b.flags.len().cmp(&a.flags.len()).then_with(|| a.task.cmp(&b.task)));
    let tasks_flagged = tasks.iter().filter(|t| !t.flags.is_empty()).count() as u32;
    HealthReport { generated_at: now, since, until, settings: settings.clone(), tasks_total: tasks.len() as u32, tasks_flagged, tasks }
}

fn judge(stats: TaskStats, settings: &HealthSettings, since: Timestamp, until: Timestamp, now: Timestamp) -> TaskHealth {
    let mut flags = Vec::new();
    if stats.failure_streak >= settings.failure_streak {
        flags.push(HealthFlag::FailingInARow);
    }
    let days_since_fired = stats.last_fired_at.map(|t| (now - t).num_seconds().max(0) as f64 / 86_400.0);
    match days_since_fired {
        None => flags.push(HealthFlag::NeverFired),
        Some(days) if days >= f64::from(settings.no_fire_days) => flags.push(HealthFlag::NotFiredRecently),
        Some(_) => {}
    }
    // The baseline is the task's own history before the period; the outliers are
    // the period's runs measured against it.
    let (in_period, before): (Vec<&Run>, Vec<&Run>) = stats.history.iter().partition(|r| r.finished_at >= since && r.finished_at < until);
    let baseline: Vec<f64> = before.iter().map(|r| r.duration_sec).collect();
    let baseline_p95 = if baseline.len() >= settings.min_duration_samples as usize { p95(&baseline) } else { None };
    let mut slow_runs: Vec<Run> = match baseline_p95 {
        Some(p) if p > 0.0 => in_period.into_iter().filter(|r| r.duration_sec > p * settings.duration_factor).cloned().collect(),
        _ => Vec::new(),
    };
    slow_runs.sort_by(|a, b| b.duration_sec.total_cmp(&a.duration_sec));
    slow_runs.truncate(5);
    if !slow_runs.is_empty() {
        flags.push(HealthFlag::SlowRuns);
    }
    let decided = stats.succeeded + stats.failed;
    let success_rate = (decided > 0).then(|| f64::from(stats.succeeded) / f64::from(decided));
    if decided >= settings.min_runs_for_rate && success_rate.is_some_and(|r| r < settings.min_success_rate) {
        flags.push(HealthFlag::LowSuccessRate);
    }
    let all_durations: Vec<f64> = stats.history.iter().map(|r| r.duration_sec).collect();
    TaskHealth {
        task: stats.task,
        owner: stats.owner,
        enabled: stats.enabled,
        runs: decided + stats.other_finished,
        succeeded: stats.succeeded,
        failed: stats.failed,
        success_rate,
        failure_streak: stats.failure_streak,
        last_fired_at: stats.last_fired_at,
        days_since_fired,
        p95_duration_sec: baseline_p95.or_else(|| p95(&all_durations)),
        slow_runs,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn at(days_ago: i64, now: Timestamp) -> Timestamp {
        now - TimeDelta::days(days_ago)
    }

    fn run(now: Timestamp, days_ago: i64, secs: f64) -> Run {
        Run { instance_id: InstanceId::generate(), finished_at: at(days_ago, now), duration_sec: secs }
    }

    #[test]
    fn given_three_failures_in_a_row_and_a_task_that_never_fired_then_both_are_flagged() {
        let now = crate::now();
        let failing = TaskStats {
            task: "failing".into(),
            owner: "team_a".into(),
            enabled: true,
            failed: 3,
            failure_streak: 3,
            last_fired_at: Some(now),
            ..Default::default()
        };
        let idle = TaskStats { task: "idle".into(), owner: "team_b".into(), enabled: true, ..Default::default() };
        let fine = TaskStats { task: "fine".into(), owner: "team_c".into(), enabled: true, succeeded: 10, last_fired_at: Some(now), ..Default::default() };
        let report = report(vec![fine, failing, idle], &HealthSettings::default(), at(30, now), now, now);
        assert_eq!(report.tasks_total, 3);
        assert_eq!(report.tasks_flagged, 2);
        let flags = |name: &str| report.tasks.iter().find(|t| t.task == name).unwrap().flags.clone();
        assert!(flags("failing").contains(&HealthFlag::FailingInARow));
        assert!(flags("failing").contains(&HealthFlag::LowSuccessRate) || report.tasks[0].failed < 5);
        assert_eq!(flags("idle"), [HealthFlag::NeverFired]);
        assert!(flags("fine").is_empty());
        assert_eq!(report.tasks.last().unwrap().task, "fine", "flagged tasks come first");
    }

    #[test]
    fn given_a_history_then_only_runs_far_above_its_p95_are_slow() {
        let now = crate::now();
        let mut history: Vec<Run> = (0..20).map(|i| run(now, 40 + i, 10.0 + i as f64 * 0.1)).collect();
        history.push(run(now, 2, 11.0));
        history.push(run(now, 1, 45.0));
        let stats = TaskStats { task: "t".into(), succeeded: 2, last_fired_at: Some(now), history, ..Default::default() };
        let report = report(vec![stats], &HealthSettings::default(), at(30, now), now, now);
        let health = &report.tasks[0];
        assert_eq!(health.flags, [HealthFlag::SlowRuns]);
        assert_eq!(health.slow_runs.len(), 1);
        assert_eq!(health.slow_runs[0].duration_sec, 45.0);
    }

    #[test]
    fn given_a_task_silent_for_longer_than_the_limit_then_it_is_flagged() {
        let now = crate::now();
        let stats = TaskStats { task: "t".into(), last_fired_at: Some(at(8, now)), ..Default::default() };
        let report = report(vec![stats], &HealthSettings::default(), at(30, now), now, now);
        assert_eq!(report.tasks[0].flags, [HealthFlag::NotFiredRecently]);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(p95(&values), Some(95.0));
        assert_eq!(p95(&[3.0]), Some(3.0));
        assert_eq!(p95(&[]), None);
    }

    #[test]
    fn settings_out_of_range_name_the_parameter() {
        let bad = HealthSettings { duration_factor: 0.5, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().field, "duration_factor");
    }
}
