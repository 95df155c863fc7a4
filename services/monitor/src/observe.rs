//! What one transition says for the metrics: pure, apart from a small memory of
//! each unfinished instance's last state and time, which turns two events into a
//! duration (RUNNING → end of attempt, DISPATCHED → RUNNING).
//!
//! The memory is bounded; when several monitors share the durable consumer each
//! sees part of the events, so durations are a sample there while counts, summed
//! across monitors, are complete.

use std::collections::{HashMap, VecDeque};

use ax_domain::attempt::{AttemptEnd, DispatchEnd};
use ax_domain::event::InstanceTransitioned;
use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::Timestamp;

use crate::metrics;

/// At most this many unfinished instances are remembered; the oldest are forgotten first.
const CAPACITY: usize = 200_000;

#[derive(Default)]
pub struct Recent {
    last: HashMap<InstanceId, (StateKind, Timestamp)>,
    order: VecDeque<InstanceId>,
}

impl Recent {
    fn remember(&mut self, id: &InstanceId, state: StateKind, at: Timestamp) {
        if self.last.insert(id.clone(), (state, at)).is_none() {
            self.order.push_back(id.clone());
        }
        while self.last.len() > CAPACITY {
            match self.order.pop_front() {
                Some(old) => {
                    self.last.remove(&old);
                }
                None => break,
            }
        }
    }

    fn forget(&mut self, id: &InstanceId) {
        self.last.remove(id);
        // `order` keeps the id until it reaches the front; bounded by CAPACITY pushes anyway.
        if self.order.len() > CAPACITY * 2 {
            let last = &self.last;
            self.order.retain(|id| last.contains_key(id));
        }
    }

    fn get(&self, id: &InstanceId) -> Option<(StateKind, Timestamp)> {
        self.last.get(id).copied()
    }
}

/// The metrics one transition moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub task: String,
    pub from: Option<StateKind>,
    pub to: StateKind,
    pub created: bool,
    pub finished: Option<StateKind>,
    pub retry: bool,
    pub attempt_end: Option<AttemptEnd>,
    pub dispatch_end: Option<DispatchEnd>,
    pub run_seconds: Option<f64>,
    pub pickup_seconds: Option<f64>,
}

/// Reads a transition (committed at `time`) and updates the memory.
pub fn observe(recent: &mut Recent, t: &InstanceTransitioned, time: Timestamp) -> Observation {
    let before = recent.get(&t.instance_id);
    let seconds_since = |state: StateKind| match before {
        Some((s, at)) if s == state => Some((time - at).as_seconds_f64().max(0.0)),
        _ => None,
    };
    let attempt_end = AttemptEnd::of(t.from, t.to, &t.reason);
    let dispatch_end = DispatchEnd::of(t.from, t.to);
    let observation = Observation {
        task: t.task.clone(),
        from: t.from,
        to: t.to,
        created: t.from.is_none(),
        finished: t.to.is_final().then_some(t.to),
        retry: t.to == StateKind::Retrying,
        attempt_end,
        dispatch_end,
        run_seconds: if attempt_end.is_some() && t.from == Some(StateKind::Running) { seconds_since(StateKind::Running) } else { None },
        pickup_seconds: if dispatch_end == Some(DispatchEnd::Started) { seconds_since(StateKind::Dispatched) } else { None },
    };
    if t.to.is_final() {
        recent.forget(&t.instance_id);
    } else {
        recent.remember(&t.instance_id, t.to, time);
    }
    observation
}

fn token(state: Option<StateKind>) -> &'static str {
    state.map_or("none", StateKind::token)
}

/// Moves the metrics.
pub fn record(o: &Observation) {
    let task = o.task.clone();
    ::metrics::counter!(metrics::TRANSITIONS, "task" => task.clone(), "from" => token(o.from), "to" => o.to.token()).increment(1);
    if o.created {
        ::metrics::counter!(metrics::INSTANCES, "task" => task.clone()).increment(1);
    }
    if let Some(state) = o.finished {
        ::metrics::counter!(metrics::OUTCOMES, "task" => task.clone(), "outcome" => state.token()).increment(1);
    }
    if o.retry {
        ::metrics::counter!(metrics::RETRIES, "task" => task.clone()).increment(1);
    }
    if let Some(end) = o.attempt_end {
        ::metrics::counter!(metrics::ATTEMPT_OUTCOMES, "task" => task.clone(), "outcome" => end.as_str()).increment(1);
    }
    if let Some(end) = o.dispatch_end {
        ::metrics::counter!(metrics::DISPATCH_OUTCOMES, "task" => task.clone(), "outcome" => end.as_str()).increment(1);
    }
    if let Some(seconds) = o.run_seconds {
        ::metrics::histogram!(metrics::RUN_DURATION, "task" => task.clone()).record(seconds);
    }
    if let Some(seconds) = o.pickup_seconds {
        ::metrics::histogram!(metrics::PICKUP_DELAY, "task" => task).record(seconds);
    }
}

#[cfg(test)]
mod tests {
    use ax_domain::ids::TraceId;
    use ax_domain::task::TriggerKind;
    use chrono::TimeDelta;

    use super::*;

    fn transition(id: &InstanceId, seq: u32, from: Option<StateKind>, to: StateKind, reason: &str) -> InstanceTransitioned {
        InstanceTransitioned {
            task: "t".into(),
            task_version: 1,
            instance_id: id.clone(),
            attempt: 1,
            seq,
            from,
            to,
            operator: "test".into(),
            reason: reason.into(),
            worker_id: None,
            trigger_type: TriggerKind::Event,
            trigger_id: "x".into(),
            trace_id: TraceId::generate(),
            shard: None,
        }
    }

    #[test]
    fn given_a_run_when_it_ends_then_its_duration_and_outcomes_are_observed() {
        use StateKind::*;
        let mut recent = Recent::default();
        let id = InstanceId::generate();
        let t0 = ax_domain::now();
        let created = observe(&mut recent, &transition(&id, 1, None, Created, ""), t0);
        assert!(created.created);
        observe(&mut recent, &transition(&id, 2, Some(Created), Dispatched, ""), t0);
        let started = observe(&mut recent, &transition(&id, 3, Some(Dispatched), Running, ""), t0 + TimeDelta::milliseconds(500));
        assert_eq!(started.dispatch_end, Some(DispatchEnd::Started));
        assert_eq!(started.pickup_seconds, Some(0.5));
        let retried = observe(&mut recent, &transition(&id, 4, Some(Running), Retrying, "timed out after 3s"), t0 + TimeDelta::seconds(4));
        assert!(retried.retry);
        assert_eq!(retried.attempt_end, Some(AttemptEnd::TimedOut));
        assert_eq!(retried.run_seconds, Some(3.5));
        assert_eq!(retried.finished, None);
        let done = observe(&mut recent, &transition(&id, 5, Some(Retrying), Created, ""), t0 + TimeDelta::seconds(5));
        assert_eq!(done.attempt_end, None);
        assert!(recent.get(&id).is_some());
        observe(&mut recent, &transition(&id, 6, Some(Created), Cancelled, "operator"), t0 + TimeDelta::seconds(6));
        assert!(recent.get(&id).is_none(), "finished instances are forgotten");
    }
}
