//! Each rule kind's judgement: given what the store and the pool say, is the
//! condition true (fire), over (clear), or undecided (leave any alert as it is)?
//! Pure, so every kind is tested without I/O.

use ax_domain::alert::AlertRule;
use ax_domain::health::p95;
use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::Timestamp;
use ax_store::monitoring::{AttemptRates, Backlog, Outcome};
use serde_json::{json, Value};

/// What a true condition is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub task: Option<String>,
    pub instance_id: Option<InstanceId>,
    pub trace_id: Option<String>,
    pub summary: String,
    pub details: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Fire(Finding),
    Clear,
    Unchanged,
}

fn percent(rate: f64) -> String {
    format!("{:.0}%", rate * 100.0)
}

/// The task's latest `threshold` finished instances all failed; a success clears.
/// `outcomes` are newest first.
pub fn consecutive_failures(rule: &AlertRule, task: &str, outcomes: &[Outcome]) -> Verdict {
    let needed = rule.threshold() as usize;
    match outcomes.first() {
        None => Verdict::Unchanged,
        Some(newest) if newest.state == StateKind::Succeeded => Verdict::Clear,
        Some(newest) => {
            let streak = outcomes.iter().take_while(|o| o.state == StateKind::Failed).count();
            if streak < needed {
                return Verdict::Unchanged;
            }
            let instances: Vec<&str> = outcomes.iter().take(needed).map(|o| o.instance_id.as_str()).collect();
            Verdict::Fire(Finding {
                task: Some(task.to_owned()),
                instance_id: Some(newest.instance_id.clone()),
                trace_id: Some(newest.trace_id.clone()),
                summary: format!("task {task} failed {needed} times in a row: {}", newest.reason),
                details: json!({ "failures_in_a_row": streak, "instances": instances, "last_reason": newest.reason }),
            })
        }
    }
}

/// `instance` (a success) ran longer than `threshold` × the p95 of the runs before
/// it. `durations` are newest first and include `instance`.
pub fn duration_outlier(rule: &AlertRule, task: &str, durations: &[(String, f64)], instance: &InstanceId, trace_id: Option<&str>) -> Verdict {
    let Some(position) = durations.iter().position(|(id, _)| id == instance.as_str()) else { return Verdict::Unchanged };
    let seconds = durations[position].1;
    let baseline: Vec<f64> = durations[position + 1..].iter().map(|(_, s)| *s).collect();
    if baseline.len() < rule.min_samples() as usize {
        return Verdict::Unchanged;
    }
    let Some(p95) = p95(&baseline).filter(|p| *p > 0.0) else { return Verdict::Unchanged };
    if seconds <= p95 * rule.threshold() {
        return Verdict::Clear;
    }
    Verdict::Fire(Finding {
        task: Some(task.to_owned()),
        instance_id: Some(instance.clone()),
        trace_id: trace_id.map(str::to_owned),
        summary: format!("task {task} ran {seconds:.1}s, {:.1}× its p95 of {p95:.1}s", seconds / p95),
        details: json!({ "duration_sec": seconds, "p95_sec": p95, "factor": seconds / p95, "baseline_runs": baseline.len() }),
    })
}

/// Attempts ended by a timeout over the window, for one task.
pub fn timeout_rate(rule: &AlertRule, task: &str, rates: AttemptRates) -> Verdict {
    if rates.attempts < u64::from(rule.min_samples()) || rates.attempts == 0 {
        return Verdict::Clear;
    }
    let rate = rates.timeouts as f64 / rates.attempts as f64;
    if rate <= rule.threshold() {
        return Verdict::Clear;
    }
    Verdict::Fire(Finding {
        task: Some(task.to_owned()),
        instance_id: None,
        trace_id: None,
        summary: format!(
            "task {task}: {} of {} attempts timed out in {}s ({} > {})",
            rates.timeouts,
            rates.attempts,
            rule.window_sec(),
            percent(rate),
            percent(rule.threshold())
        ),
        details: json!({ "timeouts": rates.timeouts, "attempts": rates.attempts, "rate": rate, "window_sec": rule.window_sec() }),
    })
}

/// Failed / finished instances over the window: of one task, or of all together.
pub fn failure_rate(rule: &AlertRule, task: Option<&str>, rates: AttemptRates) -> Verdict {
    let finished = rates.succeeded + rates.failed;
    if finished < u64::from(rule.min_samples()) || finished == 0 {
        return Verdict::Clear;
    }
    let rate = rates.failed as f64 / finished as f64;
    if rate <= rule.threshold() {
        return Verdict::Clear;
    }
    let scope = task.map_or_else(|| "all tasks".to_owned(), |t| format!("task {t}"));
    Verdict::Fire(Finding {
        task: task.map(str::to_owned),
        instance_id: None,
        trace_id: None,
        summary: format!(
            "{scope}: {} of {} instances failed in {}s ({} > {})",
            rates.failed,
            finished,
            rule.window_sec(),
            percent(rate),
            percent(rule.threshold())
        ),
        details: json!({ "failed": rates.failed, "finished": finished, "rate": rate, "window_sec": rule.window_sec() }),
    })
}

/// Instances of one task ready to run for longer than the window.
pub fn backlog(rule: &AlertRule, task: &str, backlog: Option<&Backlog>, now: Timestamp) -> Verdict {
    match backlog {
        Some(b) if b.count as f64 >= rule.threshold() => {
            let waited = (now - b.oldest_due).num_seconds().max(0);
            Verdict::Fire(Finding {
                task: Some(task.to_owned()),
                instance_id: None,
                trace_id: None,
                summary: format!("task {task}: {} instances ready to run for more than {}s (oldest {waited}s)", b.count, rule.window_sec()),
                details: json!({ "waiting": b.count, "oldest_wait_sec": waited, "older_than_sec": rule.window_sec() }),
            })
        }
        _ => Verdict::Clear,
    }
}

/// Fewer live workers than `threshold`. Judged only once the monitor has listened
/// for a lease, and only when workers were seen before or work is waiting (a
/// cluster that never had a worker is not one that lost them all).
pub fn workers_lost(rule: &AlertRule, alive: usize, listened_long_enough: bool, ever_seen: bool, work_waiting: u64) -> Verdict {
    if !listened_long_enough {
        return Verdict::Unchanged;
    }
    if alive as f64 >= rule.threshold() {
        return Verdict::Clear;
    }
    if !ever_seen && work_waiting == 0 {
        return Verdict::Unchanged;
    }
    let summary = if alive == 0 {
        format!("every worker is lost ({work_waiting} instances ready to run)")
    } else {
        format!("only {alive} live workers, fewer than {} ({work_waiting} instances ready to run)", rule.threshold())
    };
    Verdict::Fire(Finding {
        task: None,
        instance_id: None,
        trace_id: None,
        summary,
        details: json!({ "alive": alive, "minimum": rule.threshold(), "ready_instances": work_waiting }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> AlertRule {
        AlertRule::from_json(json.as_bytes()).unwrap()
    }

    fn outcome(state: StateKind) -> Outcome {
        Outcome {
            instance_id: InstanceId::generate(),
            state,
            reason: if state == StateKind::Failed { "exit code 1".into() } else { String::new() },
            trace_id: "trc_x".into(),
            finished_at: ax_domain::now(),
        }
    }

    #[test]
    fn given_three_failures_then_it_fires_on_the_newest_and_a_success_clears() {
        use StateKind::*;
        let r = rule(r#"{"name": "f", "kind": "consecutive_failures"}"#);
        let failures = vec![outcome(Failed), outcome(Failed), outcome(Failed), outcome(Succeeded)];
        let Verdict::Fire(finding) = consecutive_failures(&r, "t", &failures) else { panic!("fires") };
        assert_eq!(finding.instance_id.as_ref(), Some(&failures[0].instance_id));
        assert!(finding.summary.contains("failed 3 times in a row: exit code 1"), "{}", finding.summary);
        assert_eq!(consecutive_failures(&r, "t", &failures[1..]), Verdict::Unchanged);
        assert_eq!(consecutive_failures(&r, "t", &[outcome(Succeeded), outcome(Failed)]), Verdict::Clear);
        assert_eq!(consecutive_failures(&r, "t", &[]), Verdict::Unchanged);
    }

    #[test]
    fn given_a_history_then_only_a_run_far_above_its_p95_fires() {
        let r = rule(r#"{"name": "s", "kind": "duration_outlier", "min_samples": 5}"#);
        let slow = InstanceId::generate();
        let mut durations = vec![(slow.as_str().to_owned(), 40.0)];
        durations.extend((0..5).map(|i| (format!("ins_{i}"), 10.0)));
        assert!(matches!(duration_outlier(&r, "t", &durations, &slow, None), Verdict::Fire(_)));
        durations[0].1 = 29.0;
        assert_eq!(duration_outlier(&r, "t", &durations, &slow, None), Verdict::Clear);
        assert_eq!(duration_outlier(&r, "t", &durations[..3], &slow, None), Verdict::Unchanged, "too little history");
    }

    #[test]
    fn rates_fire_above_the_threshold_with_enough_samples() {
        let r = rule(r#"{"name": "t", "kind": "timeout_rate", "threshold": 0.2, "min_samples": 5}"#);
        assert!(matches!(timeout_rate(&r, "t", AttemptRates { attempts: 10, timeouts: 3, ..Default::default() }), Verdict::Fire(_)));
        assert_eq!(timeout_rate(&r, "t", AttemptRates { attempts: 10, timeouts: 2, ..Default::default() }), Verdict::Clear);
        assert_eq!(timeout_rate(&r, "t", AttemptRates { attempts: 4, timeouts: 4, ..Default::default() }), Verdict::Clear);
        let mass = rule(r#"{"name": "m", "kind": "failure_rate"}"#);
        let Verdict::Fire(f) = failure_rate(&mass, None, AttemptRates { succeeded: 5, failed: 20, ..Default::default() }) else { panic!() };
        assert!(f.summary.starts_with("all tasks: 20 of 25"), "{}", f.summary);
    }

    #[test]
    fn workers_lost_needs_time_to_listen_and_a_reason_to_expect_workers() {
        let r = rule(r#"{"name": "w", "kind": "workers_lost"}"#);
        assert_eq!(workers_lost(&r, 0, false, true, 5), Verdict::Unchanged);
        assert_eq!(workers_lost(&r, 0, true, false, 0), Verdict::Unchanged);
        assert!(matches!(workers_lost(&r, 0, true, true, 0), Verdict::Fire(_)));
        assert!(matches!(workers_lost(&r, 0, true, false, 3), Verdict::Fire(_)));
        assert_eq!(workers_lost(&r, 2, true, true, 0), Verdict::Clear);
    }

    #[test]
    fn backlog_fires_at_its_threshold() {
        let r = rule(r#"{"name": "b", "kind": "backlog", "threshold": 2}"#);
        let now = ax_domain::now();
        let b = Backlog { task: "t".into(), count: 2, oldest_due: now - chrono::TimeDelta::seconds(400) };
        assert!(matches!(backlog(&r, "t", Some(&b), now), Verdict::Fire(_)));
        assert_eq!(backlog(&r, "t", Some(&Backlog { count: 1, ..b }), now), Verdict::Clear);
        assert_eq!(backlog(&r, "t", None, now), Verdict::Clear);
    }
}
