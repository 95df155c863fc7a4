//! Alert rules at work: which conditions to judge when, and what a verdict does.
//!
//! - When instances finish (`on_finished`): `consecutive_failures` and
//!   `duration_outlier`, for the tasks that just finished.
//! - On the periodic pass (`periodic`): the window rules (`timeout_rate`,
//!   `failure_rate`, `backlog`) and `workers_lost`; a second look at open
//!   `consecutive_failures` alerts; alerts whose rule is gone; reminders.
//!
//! A condition is a fingerprint: the rule's name, plus `:<task>` for rules judged
//! per task. Judging is pure ([`judge`]); the store keeps one open alert per
//! fingerprint and decides, in the same transaction, what to notify.
//!
//! Scope per kind: `consecutive_failures`, `timeout_rate`, `backlog` and
//! `duration_outlier` judge each task on its own (a rule without `task` watches
//! every task); `failure_rate` without `task` judges all tasks together (mass
//! failure); `workers_lost` judges the pool.

pub mod judge;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_domain::alert::{AlertChannel, AlertRule, RuleKind};
use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::Timestamp;
use ax_store::alerts::{AlertRecord, FireOutcome, Firing};
use ax_store::monitoring::AttemptRates;
use ax_store::StoreError;

use self::judge::Verdict;
use crate::pool::Sweep;
use crate::{metrics, Shared};

/// How much history a duration judgement reads.
const DURATION_HISTORY: u32 = 200;

/// Rules, channels, owners and open conditions, reloaded when older than asked.
pub struct Catalog {
    pub rules: Vec<AlertRule>,
    pub channels: Vec<AlertChannel>,
    pub owners: HashMap<String, String>,
    pub open: Vec<AlertRecord>,
    open_fingerprints: HashSet<String>,
}

impl Catalog {
    /// The channels a rule's notifications go to.
    pub fn channels_for(&self, rule: &AlertRule) -> Vec<String> {
        self.channels.iter().filter(|c| c.takes(rule)).map(|c| c.name.clone()).collect()
    }

    fn is_open(&self, fingerprint: &str) -> bool {
        self.open_fingerprints.contains(fingerprint)
    }
}

/// When the catalog was read, and what it said.
type Loaded = Option<(Instant, Arc<Catalog>)>;

#[derive(Clone, Default)]
pub struct RuleCache {
    loaded: Arc<tokio::sync::Mutex<Loaded>>,
}

impl RuleCache {
    /// The catalog, read again from MySQL if older than `max_age`.
    pub async fn get(&self, store: &ax_store::Store, max_age: Duration) -> Result<Arc<Catalog>, StoreError> {
        let mut loaded = self.loaded.lock().await;
        if let Some((_, catalog)) = loaded.as_ref().filter(|(at, _)| at.elapsed() < max_age) {
            return Ok(catalog.clone());
        }
        let rules = store.alert_rules().await?.into_iter().map(|s| s.definition).filter(|r| r.enabled).collect();
        let channels = store.alert_channels().await?.into_iter().map(|s| s.definition).filter(|c| c.enabled).collect();
        let owners = store.task_owners().await?;
        let open = store.open_alerts().await?;
        let open_fingerprints = open.iter().map(|a| a.fingerprint.clone()).collect();
        let catalog = Arc::new(Catalog { rules, channels, owners, open, open_fingerprints });
        *loaded = Some((Instant::now(), catalog.clone()));
        Ok(catalog)
    }

    /// Forces the next `get` to read MySQL (a task's owner may have changed).
    pub async fn invalidate(&self) {
        *self.loaded.lock().await = None;
    }
}

pub fn fingerprint(rule: &AlertRule, task: Option<&str>) -> String {
    match task {
        Some(task) => format!("{}:{task}", rule.name),
        None => rule.name.clone(),
    }
}

/// Makes a verdict real: opens (or counts) the alert, or resolves it.
async fn apply(shared: &Shared, catalog: &Catalog, rule: &AlertRule, task: Option<&str>, verdict: Verdict, now: Timestamp) -> Result<(), StoreError> {
    let fingerprint = fingerprint(rule, task);
    let labels = [("rule", rule.name.clone()), ("level", rule.level().as_str().to_owned())];
    match verdict {
        Verdict::Unchanged => {}
        Verdict::Fire(finding) => {
            let owner = finding.task.as_ref().and_then(|t| catalog.owners.get(t)).cloned();
            let firing = Firing {
                rule,
                fingerprint: fingerprint.clone(),
                task: finding.task.clone(),
                owner,
                instance_id: finding.instance_id.clone(),
                trace_id: finding.trace_id.as_deref().and_then(|t| t.parse().ok()),
                summary: finding.summary.clone(),
                details: finding.details,
            };
            match shared.deps.store.fire_alert(&firing, &catalog.channels_for(rule), now).await? {
                FireOutcome::Opened { id, notified: true } => {
                    ::metrics::counter!(metrics::ALERTS_FIRED, &labels).increment(1);
                    tracing::warn!(alert_id = %id, rule = %rule.name, level = %rule.level(), task = ?finding.task, instance_id = ?finding.instance_id, trace_id = ?finding.trace_id, summary = %finding.summary, "alert firing");
                    shared.notify_wake.notify_one();
                }
                FireOutcome::Opened { id, notified: false } => {
                    ::metrics::counter!(metrics::ALERTS_SILENCED, &labels).increment(1);
                    tracing::info!(alert_id = %id, rule = %rule.name, fingerprint = %fingerprint, "alert firing inside its silence window; not notified");
                }
                FireOutcome::Repeated { id } => tracing::debug!(alert_id = %id, fingerprint = %fingerprint, "alert still firing"),
            }
        }
        Verdict::Clear => {
            if !catalog.is_open(&fingerprint) {
                return Ok(());
            }
            if let Some((id, notified)) = shared.deps.store.resolve_alert(&fingerprint, &catalog.channels_for(rule), now).await? {
                ::metrics::counter!(metrics::ALERTS_RESOLVED, &labels).increment(1);
                tracing::info!(alert_id = %id, rule = %rule.name, fingerprint = %fingerprint, "alert resolved");
                if notified {
                    shared.notify_wake.notify_one();
                }
            }
        }
    }
    Ok(())
}

/// An instance that just succeeded or failed for good.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub task: String,
    pub instance_id: InstanceId,
    pub state: StateKind,
    pub trace_id: String,
}

/// Judges the rules that look at finished instances, for the tasks in `finished`.
///
/// # Errors
/// MySQL failures; the caller has the events redelivered.
pub(crate) async fn on_finished(shared: &Shared, finished: &[Finished]) -> Result<(), StoreError> {
    if finished.is_empty() {
        return Ok(());
    }
    let catalog = shared.rules.get(&shared.deps.store, Duration::from_secs(1)).await?;
    let mut tasks: Vec<&str> = finished.iter().map(|f| f.task.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let now = ax_domain::now();
    for rule in catalog.rules.iter().filter(|r| r.kind.on_event()) {
        for &task in tasks.iter().filter(|t| rule.applies_to(t)) {
            match rule.kind {
                RuleKind::ConsecutiveFailures => {
                    let outcomes = shared.deps.store.latest_outcomes(task, rule.threshold() as u32).await?;
                    apply(shared, &catalog, rule, Some(task), judge::consecutive_failures(rule, task, &outcomes), now).await?;
                }
                RuleKind::DurationOutlier => {
                    let succeeded: Vec<&Finished> = finished.iter().filter(|f| f.task == task && f.state == StateKind::Succeeded).collect();
                    if succeeded.is_empty() {
                        continue;
                    }
                    let durations = shared.deps.store.latest_durations(task, DURATION_HISTORY.max(rule.min_samples() + 50)).await?;
                    for f in succeeded {
                        let verdict = judge::duration_outlier(rule, task, &durations, &f.instance_id, Some(&f.trace_id));
                        apply(shared, &catalog, rule, Some(task), verdict, now).await?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// What the periodic pass measured for the rules.
pub(crate) struct PassInputs<'a> {
    pub sweep: &'a Sweep,
    /// CREATED instances, due or not: work a worker would take.
    pub ready_instances: u64,
    pub now: Timestamp,
}

/// Judges the window rules and the pool, clears what is over, reminds what keeps firing.
///
/// # Errors
/// MySQL failures; the next pass tries again.
pub(crate) async fn periodic(shared: &Shared, inputs: &PassInputs<'_>) -> Result<(), StoreError> {
    let store = &shared.deps.store;
    let now = inputs.now;
    let catalog = shared.rules.get(store, Duration::ZERO).await?;
    let mut rates: HashMap<u64, HashMap<String, AttemptRates>> = HashMap::new();
    let mut backlogs: HashMap<u64, Vec<ax_store::monitoring::Backlog>> = HashMap::new();
    let mut firing_now: HashSet<String> = HashSet::new();
    let listened = (now - shared.started_at).to_std().unwrap_or_default() >= shared.config.scheduler.lease.0;

    for rule in &catalog.rules {
        let window = rule.window_sec();
        let since = now - chrono::TimeDelta::seconds(window as i64);
        match rule.kind {
            RuleKind::TimeoutRate | RuleKind::FailureRate => {
                if let std::collections::hash_map::Entry::Vacant(slot) = rates.entry(window) {
                    slot.insert(store.attempt_rates(since).await?);
                }
                let by_task = &rates[&window];
                let mut verdicts: Vec<(Option<String>, Verdict)> = Vec::new();
                match (rule.kind, &rule.task) {
                    (RuleKind::FailureRate, None) => {
                        let mut all = AttemptRates::default();
                        for r in by_task.values() {
                            all.succeeded += r.succeeded;
                            all.failed += r.failed;
                        }
                        verdicts.push((None, judge::failure_rate(rule, None, all)));
                    }
                    (RuleKind::FailureRate, Some(task)) => {
                        let r = by_task.get(task).copied().unwrap_or_default();
                        verdicts.push((Some(task.clone()), judge::failure_rate(rule, Some(task), r)));
                    }
                    _ => {
                        for (task, r) in by_task.iter().filter(|(t, _)| rule.applies_to(t)) {
                            verdicts.push((Some(task.clone()), judge::timeout_rate(rule, task, *r)));
                        }
                    }
                }
                for (task, verdict) in verdicts {
                    if matches!(verdict, Verdict::Fire(_)) {
                        firing_now.insert(fingerprint(rule, task.as_deref()));
                        apply(shared, &catalog, rule, task.as_deref(), verdict, now).await?;
                    }
                }
            }
            RuleKind::Backlog => {
                if let std::collections::hash_map::Entry::Vacant(slot) = backlogs.entry(window) {
                    slot.insert(store.backlog(since).await?);
                }
                for b in backlogs[&window].iter().filter(|b| rule.applies_to(&b.task)) {
                    let verdict = judge::backlog(rule, &b.task, Some(b), now);
                    if matches!(verdict, Verdict::Fire(_)) {
                        firing_now.insert(fingerprint(rule, Some(&b.task)));
                        apply(shared, &catalog, rule, Some(&b.task), verdict, now).await?;
                    }
                }
            }
            RuleKind::WorkersLost => {
                let verdict = judge::workers_lost(rule, inputs.sweep.alive.len(), listened, inputs.sweep.ever_seen, inputs.ready_instances);
                match verdict {
                    Verdict::Fire(_) => {
                        firing_now.insert(fingerprint(rule, None));
                        apply(shared, &catalog, rule, None, verdict, now).await?;
                    }
                    // Not yet able to judge: keep whatever is open.
                    Verdict::Unchanged => {
                        firing_now.insert(fingerprint(rule, None));
                    }
                    Verdict::Clear => {}
                }
            }
            RuleKind::ConsecutiveFailures | RuleKind::DurationOutlier => {}
        }
    }

    let rules: HashMap<&str, &AlertRule> = catalog.rules.iter().map(|r| (r.name.as_str(), r)).collect();
    for alert in &catalog.open {
        let Some(rule) = rules.get(alert.rule.as_str()).copied() else {
            // Its rule was deleted or disabled: nothing judges it any more.
            if store.resolve_alert(&alert.fingerprint, &[], now).await?.is_some() {
                tracing::info!(alert_id = %alert.id, rule = %alert.rule, "alert resolved: its rule is gone or disabled");
            }
            continue;
        };
        let task = alert.task.as_deref();
        match rule.kind {
            RuleKind::ConsecutiveFailures => {
                // A second look, in case the success that clears it was judged by
                // a monitor that did not know the alert was open yet.
                if let Some(task) = task {
                    let outcomes = store.latest_outcomes(task, rule.threshold() as u32).await?;
                    if judge::consecutive_failures(rule, task, &outcomes) == Verdict::Clear {
                        apply(shared, &catalog, rule, Some(task), Verdict::Clear, now).await?;
                        continue;
                    }
                }
            }
            RuleKind::DurationOutlier => {}
            _ if !firing_now.contains(&alert.fingerprint) => {
                apply(shared, &catalog, rule, task, Verdict::Clear, now).await?;
                continue;
            }
            _ => {}
        }
        let seen_since = alert.last_seen_at > alert.notified_at.unwrap_or(alert.fired_at);
        if alert.acknowledged_at.is_none() && seen_since && store.remind_alert(&alert.id, rule.silence_sec, &catalog.channels_for(rule), now).await? {
            tracing::info!(alert_id = %alert.id, rule = %rule.name, "alert still firing; reminded");
            shared.notify_wake.notify_one();
        }
    }

    let mut open_by_level: HashMap<&str, u64> = ax_domain::alert::AlertLevel::ALL.iter().map(|l| (l.as_str(), 0)).collect();
    for alert in store.open_alerts().await? {
        *open_by_level.entry(alert.level.as_str()).or_default() += 1;
    }
    for (level, count) in open_by_level {
        ::metrics::gauge!(metrics::ALERTS_OPEN, "level" => level).set(count as f64);
    }
    Ok(())
}
