//! The instance state machine.
//!
//! ```text
//!            ┌──────────── Waiting (behind max_running_instances)
//!            ▼
//! (new) → Created → Dispatched → Running → Succeeded | Failed | Retrying
//!            ▲          │  (handed back)       │                  │
//!            └──────────┴──────────────────────┴──── next attempt ┘
//! plus Cancelled (any non-final state), Discarded and Rejected (born final).
//!
//! A sharded or broadcast firing does not run itself: its instance fans out into
//! shard instances (each with the table above) and settles when the last ends:
//! (new) → Created → Sharded → Succeeded | Failed | Cancelled
//! ```
//!
//! Each state is a type that carries only what is valid in it, and each move is a
//! method that consumes the state it leaves, so a transition that is not in the table
//! cannot be written. [`apply`] is the one dynamic entry point: it matches a loaded
//! state against a command and calls those methods; every other pair is a
//! [`TransitionError`]. It is pure: the store commits what it returns.

use serde::{Deserialize, Serialize};

use crate::ids::WorkerId;
use crate::Timestamp;

/// The name of a state, as stored in MySQL (`CREATED`) and as a subject token (`created`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StateKind {
    Waiting,
    Created,
    Dispatched,
    Running,
    Retrying,
    Succeeded,
    Failed,
    Cancelled,
    Discarded,
    Rejected,
    /// A firing split into shard instances, waiting for them all to end.
    Sharded,
}

impl StateKind {
    pub const ALL: [StateKind; 11] = [
        StateKind::Waiting,
        StateKind::Created,
        StateKind::Dispatched,
        StateKind::Running,
        StateKind::Retrying,
        StateKind::Succeeded,
        StateKind::Failed,
        StateKind::Cancelled,
        StateKind::Discarded,
        StateKind::Rejected,
        StateKind::Sharded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Waiting => "WAITING",
            StateKind::Created => "CREATED",
            StateKind::Dispatched => "DISPATCHED",
            StateKind::Running => "RUNNING",
            StateKind::Retrying => "RETRYING",
            StateKind::Succeeded => "SUCCEEDED",
            StateKind::Failed => "FAILED",
            StateKind::Cancelled => "CANCELLED",
            StateKind::Discarded => "DISCARDED",
            StateKind::Rejected => "REJECTED",
            StateKind::Sharded => "SHARDED",
        }
    }

    /// Lower case, for subjects: `ax.event.instance.<task>.succeeded`.
    pub fn token(self) -> &'static str {
        match self {
            StateKind::Waiting => "waiting",
            StateKind::Created => "created",
            StateKind::Dispatched => "dispatched",
            StateKind::Running => "running",
            StateKind::Retrying => "retrying",
            StateKind::Succeeded => "succeeded",
            StateKind::Failed => "failed",
            StateKind::Cancelled => "cancelled",
            StateKind::Discarded => "discarded",
            StateKind::Rejected => "rejected",
            StateKind::Sharded => "sharded",
        }
    }

    /// Accepts either spelling.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str().eq_ignore_ascii_case(value))
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            StateKind::Succeeded | StateKind::Failed | StateKind::Cancelled | StateKind::Discarded | StateKind::Rejected
        )
    }

    /// States an instance may be born in.
    pub fn is_initial(self) -> bool {
        matches!(self, StateKind::Created | StateKind::Waiting | StateKind::Discarded | StateKind::Rejected)
    }

    /// The transition table. [`apply`] can produce exactly these pairs; a unit test
    /// checks the two agree.
    pub fn can_move_to(self, to: StateKind) -> bool {
        use StateKind::*;
        match self {
            Waiting => matches!(to, Created | Cancelled),
            Created => matches!(to, Dispatched | Sharded | Cancelled),
            Dispatched => matches!(to, Running | Created | Retrying | Failed | Cancelled),
            Running => matches!(to, Succeeded | Failed | Retrying | Created | Cancelled),
            Retrying => matches!(to, Created | Cancelled),
            Sharded => matches!(to, Succeeded | Failed | Cancelled),
            Succeeded | Failed | Cancelled | Discarded | Rejected => false,
        }
    }
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---- the states -------------------------------------------------------------

/// Waiting for a slot under `max_running_instances` (serial blocking strategy).
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting;

/// Ready to go to a worker once its due time has come.
#[derive(Debug, Clone, PartialEq)]
pub struct Created;

/// Pushed onto one worker's queue; that worker holds a lease on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    pub worker_id: WorkerId,
    pub lease_expires_at: Timestamp,
}

/// The worker confirmed it started the handler.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub worker_id: WorkerId,
    pub lease_expires_at: Timestamp,
    pub started_at: Timestamp,
    /// Start plus the task's timeout: past it (and a grace period) the scheduler
    /// ends the attempt itself.
    pub deadline_at: Timestamp,
}

/// Failed, with another attempt due at `next_attempt_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrying {
    pub next_attempt_at: Timestamp,
}

/// Split into `total` shard instances; ends when the last of them ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Sharded {
    pub total: u32,
}

/// A final state, with when it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub kind: StateKind,
    pub finished_at: Timestamp,
}

/// An instance's state with the data valid in it.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceState {
    Waiting(Waiting),
    Created(Created),
    Dispatched(Dispatched),
    Running(Running),
    Retrying(Retrying),
    Sharded(Sharded),
    Finished(Finished),
}

impl InstanceState {
    pub fn kind(&self) -> StateKind {
        match self {
            InstanceState::Waiting(_) => StateKind::Waiting,
            InstanceState::Created(_) => StateKind::Created,
            InstanceState::Dispatched(_) => StateKind::Dispatched,
            InstanceState::Running(_) => StateKind::Running,
            InstanceState::Retrying(_) => StateKind::Retrying,
            InstanceState::Sharded(_) => StateKind::Sharded,
            InstanceState::Finished(f) => f.kind,
        }
    }

    pub fn worker_id(&self) -> Option<&WorkerId> {
        match self {
            InstanceState::Dispatched(d) => Some(&d.worker_id),
            InstanceState::Running(r) => Some(&r.worker_id),
            _ => None,
        }
    }

    pub fn lease_expires_at(&self) -> Option<Timestamp> {
        match self {
            InstanceState::Dispatched(d) => Some(d.lease_expires_at),
            InstanceState::Running(r) => Some(r.lease_expires_at),
            _ => None,
        }
    }
}

// ---- the moves: each consumes the state it leaves ------------------------------

impl Waiting {
    pub fn release(self) -> Created {
        Created
    }
}

impl Created {
    pub fn dispatch(self, worker_id: WorkerId, lease_expires_at: Timestamp) -> Dispatched {
        Dispatched { worker_id, lease_expires_at }
    }
    pub fn fan_out(self, total: u32) -> Sharded {
        Sharded { total }
    }
}

impl Dispatched {
    pub fn start(self, now: Timestamp, lease_expires_at: Timestamp, deadline_at: Timestamp) -> Running {
        Running { worker_id: self.worker_id, lease_expires_at, started_at: now, deadline_at }
    }
    /// The worker gave it back unstarted (shutting down); it goes to another at once.
    pub fn hand_back(self) -> Created {
        Created
    }
}

impl Running {
    pub fn succeed(self, now: Timestamp) -> Finished {
        Finished { kind: StateKind::Succeeded, finished_at: now }
    }
    pub fn hand_back(self) -> Created {
        Created
    }
}

impl Retrying {
    pub fn next_attempt(self) -> Created {
        Created
    }
}

impl Sharded {
    /// Every shard ended: the firing ends as `outcome` (succeeded, failed or
    /// cancelled); `None` for any other outcome.
    pub fn settle(self, outcome: StateKind, now: Timestamp) -> Option<Finished> {
        matches!(outcome, StateKind::Succeeded | StateKind::Failed | StateKind::Cancelled)
            .then_some(Finished { kind: outcome, finished_at: now })
    }
}

fn fail_or_retry(now: Timestamp, retry_at: Option<Timestamp>) -> InstanceState {
    match retry_at {
        Some(next_attempt_at) => InstanceState::Retrying(Retrying { next_attempt_at }),
        None => InstanceState::Finished(Finished { kind: StateKind::Failed, finished_at: now }),
    }
}

fn cancelled(now: Timestamp) -> Finished {
    Finished { kind: StateKind::Cancelled, finished_at: now }
}

// ---- the dynamic entry point --------------------------------------------------

/// What an instance looks like to [`apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub state: InstanceState,
    pub attempt: u32,
}

/// Something that wants to move an instance. Commands from workers carry the
/// attempt and worker they are about, so a report from a stale attempt or from a
/// worker that no longer holds the lease is refused (fencing).
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Release,
    Dispatch { worker_id: WorkerId, lease_expires_at: Timestamp },
    Start { attempt: u32, worker_id: WorkerId, lease_expires_at: Timestamp, deadline_at: Timestamp },
    Succeed { attempt: u32, worker_id: WorkerId },
    /// `retry_at` is `None` when no attempt is left or the failure is final.
    Fail { attempt: u32, worker_id: WorkerId, reason: String, retry_at: Option<Timestamp> },
    HandBack { attempt: u32, worker_id: WorkerId },
    /// The scheduler gives up on a worker whose lease ran out (or a timeout passed).
    Expire { reason: String, retry_at: Option<Timestamp> },
    NextAttempt,
    Cancel { reason: String },
    /// Split a firing into `total` shard instances (the store creates them).
    FanOut { total: u32 },
    /// The last shard ended; the firing ends as `outcome`.
    Settle { outcome: StateKind, reason: String },
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::Release => "release",
            Command::Dispatch { .. } => "dispatch",
            Command::Start { .. } => "start",
            Command::Succeed { .. } => "succeed",
            Command::Fail { .. } => "fail",
            Command::HandBack { .. } => "hand_back",
            Command::Expire { .. } => "expire",
            Command::NextAttempt => "next_attempt",
            Command::Cancel { .. } => "cancel",
            Command::FanOut { .. } => "fan_out",
            Command::Settle { .. } => "settle",
        }
    }
}

/// The result of a legal move.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    pub from: StateKind,
    pub state: InstanceState,
    pub attempt: u32,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("cannot {command} an instance that is {state}")]
    Illegal { command: &'static str, state: StateKind },
    #[error("report is for attempt {reported} but the instance is on attempt {current}")]
    StaleAttempt { reported: u32, current: u32 },
    #[error("report comes from worker {reported} but the instance is held by {holder}")]
    NotHolder { reported: WorkerId, holder: WorkerId },
}

/// Moves `snapshot` by `command`.
///
/// # Errors
/// [`TransitionError::Illegal`] for a pair outside the table, `StaleAttempt` and
/// `NotHolder` for a worker report that no longer has the right to move it.
pub fn apply(snapshot: Snapshot, command: Command, now: Timestamp) -> Result<Moved, TransitionError> {
    let from = snapshot.state.kind();
    let attempt = snapshot.attempt;
    let check = |reported: u32, worker: &WorkerId, holder: &WorkerId| -> Result<(), TransitionError> {
        if reported != attempt {
            return Err(TransitionError::StaleAttempt { reported, current: attempt });
        }
        if worker != holder {
            return Err(TransitionError::NotHolder { reported: worker.clone(), holder: holder.clone() });
        }
        Ok(())
    };
    let moved = |state: InstanceState, attempt: u32, reason: String| Moved { from, state, attempt, reason };
    let illegal = TransitionError::Illegal { command: command.name(), state: from };

    Ok(match (snapshot.state, command) {
        (InstanceState::Waiting(w), Command::Release) => moved(InstanceState::Created(w.release()), attempt, "slot free".into()),
        (InstanceState::Created(c), Command::Dispatch { worker_id, lease_expires_at }) => {
            moved(InstanceState::Dispatched(c.dispatch(worker_id, lease_expires_at)), attempt, String::new())
        }
        (InstanceState::Dispatched(d), Command::Start { attempt: reported, worker_id, lease_expires_at, deadline_at }) => {
            check(reported, &worker_id, &d.worker_id)?;
            moved(InstanceState::Running(d.start(now, lease_expires_at, deadline_at)), attempt, String::new())
        }
        (InstanceState::Running(r), Command::Succeed { attempt: reported, worker_id }) => {
            check(reported, &worker_id, &r.worker_id)?;
            moved(InstanceState::Finished(r.succeed(now)), attempt, String::new())
        }
        (InstanceState::Running(r), Command::Fail { attempt: reported, worker_id, reason, retry_at }) => {
            check(reported, &worker_id, &r.worker_id)?;
            moved(fail_or_retry(now, retry_at), attempt, reason)
        }
        (InstanceState::Dispatched(d), Command::Fail { attempt: reported, worker_id, reason, retry_at }) => {
            // A worker may refuse before starting (no handler, guard held elsewhere).
            check(reported, &worker_id, &d.worker_id)?;
            moved(fail_or_retry(now, retry_at), attempt, reason)
        }
        (InstanceState::Dispatched(d), Command::HandBack { attempt: reported, worker_id }) => {
            check(reported, &worker_id, &d.worker_id)?;
            moved(InstanceState::Created(d.hand_back()), attempt, "handed back by worker".into())
        }
        (InstanceState::Running(r), Command::HandBack { attempt: reported, worker_id }) => {
            check(reported, &worker_id, &r.worker_id)?;
            moved(InstanceState::Created(r.hand_back()), attempt, "handed back by worker".into())
        }
        (InstanceState::Dispatched(d), Command::Expire { reason, .. }) => {
            // A worker confirms RUNNING before it starts a handler, so a DISPATCHED
            // attempt never ran: its worker died or froze with it queued (prefetched,
            // say). It is dispatched again with the attempt unspent; should the old
            // worker come back, its RUNNING names a worker or a state that no longer
            // holds and is refused.
            moved(InstanceState::Created(d.hand_back()), attempt, format!("{reason} before the attempt started; dispatched again"))
        }
        (InstanceState::Running(_), Command::Expire { reason, retry_at }) => moved(fail_or_retry(now, retry_at), attempt, reason),
        (InstanceState::Created(c), Command::FanOut { total }) if total > 0 => {
            moved(InstanceState::Sharded(c.fan_out(total)), attempt, format!("split into {total} shards"))
        }
        (InstanceState::Sharded(s), Command::Settle { outcome, reason }) => match s.settle(outcome, now) {
            Some(finished) => moved(InstanceState::Finished(finished), attempt, reason),
            None => return Err(illegal),
        },
        (InstanceState::Retrying(r), Command::NextAttempt) => {
            moved(InstanceState::Created(r.next_attempt()), attempt + 1, format!("attempt {}", attempt + 1))
        }
        (
            InstanceState::Waiting(_)
            | InstanceState::Created(_)
            | InstanceState::Dispatched(_)
            | InstanceState::Running(_)
            | InstanceState::Retrying(_)
            | InstanceState::Sharded(_),
            Command::Cancel { reason },
        ) => moved(InstanceState::Finished(cancelled(now)), attempt, reason),
        _ => return Err(illegal),
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn now() -> Timestamp {
        crate::now()
    }
    fn worker(name: &str) -> WorkerId {
        name.parse().unwrap()
    }

    /// One representative state of each kind, held by worker `w1` at attempt 1.
    fn state_of(kind: StateKind) -> InstanceState {
        let lease = now() + TimeDelta::seconds(30);
        match kind {
            StateKind::Waiting => InstanceState::Waiting(Waiting),
            StateKind::Created => InstanceState::Created(Created),
            StateKind::Dispatched => InstanceState::Dispatched(Dispatched { worker_id: worker("w1"), lease_expires_at: lease }),
            StateKind::Running => InstanceState::Running(Running { worker_id: worker("w1"), lease_expires_at: lease, started_at: now(), deadline_at: lease }),
            StateKind::Retrying => InstanceState::Retrying(Retrying { next_attempt_at: lease }),
            StateKind::Sharded => InstanceState::Sharded(Sharded { total: 3 }),
            kind => InstanceState::Finished(Finished { kind, finished_at: now() }),
        }
    }

    /// Every command, as the holder `w1` of attempt 1 would send it.
    fn commands() -> Vec<Command> {
        let lease = now() + TimeDelta::seconds(30);
        let w = worker("w1");
        vec![
            Command::Release,
            Command::Dispatch { worker_id: w.clone(), lease_expires_at: lease },
            Command::Start { attempt: 1, worker_id: w.clone(), lease_expires_at: lease, deadline_at: lease },
            Command::Succeed { attempt: 1, worker_id: w.clone() },
            Command::Fail { attempt: 1, worker_id: w.clone(), reason: "boom".into(), retry_at: None },
            Command::Fail { attempt: 1, worker_id: w.clone(), reason: "boom".into(), retry_at: Some(lease) },
            Command::HandBack { attempt: 1, worker_id: w.clone() },
            Command::Expire { reason: "lease expired".into(), retry_at: None },
            Command::Expire { reason: "lease expired".into(), retry_at: Some(lease) },
            Command::NextAttempt,
            Command::Cancel { reason: "operator".into() },
            Command::FanOut { total: 3 },
            Command::Settle { outcome: StateKind::Succeeded, reason: String::new() },
            Command::Settle { outcome: StateKind::Failed, reason: "shard 1 failed".into() },
            Command::Settle { outcome: StateKind::Cancelled, reason: "shard 2 cancelled".into() },
            Command::Settle { outcome: StateKind::Running, reason: String::new() },
        ]
    }

    #[test]
    fn apply_produces_exactly_the_transition_table() {
        let mut produced = std::collections::BTreeSet::new();
        for from in StateKind::ALL {
            for command in commands() {
                let name = command.name();
                match apply(Snapshot { state: state_of(from), attempt: 1 }, command, now()) {
                    Ok(moved) => {
                        let to = moved.state.kind();
                        assert!(from.can_move_to(to), "apply moved {from} to {to} by {name}, not in the table");
                        produced.insert((from, to));
                    }
                    Err(err) => assert!(matches!(err, TransitionError::Illegal { .. }), "{from} {name}: {err}"),
                }
            }
        }
        for from in StateKind::ALL {
            for to in StateKind::ALL {
                assert_eq!(
                    from.can_move_to(to),
                    produced.contains(&(from, to)),
                    "table and apply disagree on {from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn final_states_never_move() {
        for kind in StateKind::ALL.into_iter().filter(|k| k.is_final()) {
            for command in commands() {
                let result = apply(Snapshot { state: state_of(kind), attempt: 1 }, command, now());
                assert!(result.is_err(), "{kind} moved");
            }
        }
    }

    #[test]
    fn given_running_when_an_older_attempt_reports_then_it_is_refused() {
        let snapshot = Snapshot { state: state_of(StateKind::Running), attempt: 2 };
        let err = apply(snapshot, Command::Succeed { attempt: 1, worker_id: worker("w1") }, now()).unwrap_err();
        assert_eq!(err, TransitionError::StaleAttempt { reported: 1, current: 2 });
    }

    #[test]
    fn given_running_when_another_worker_reports_then_it_is_refused() {
        let snapshot = Snapshot { state: state_of(StateKind::Running), attempt: 1 };
        let err = apply(snapshot, Command::Succeed { attempt: 1, worker_id: worker("w2") }, now()).unwrap_err();
        assert!(matches!(err, TransitionError::NotHolder { .. }));
    }

    #[test]
    fn given_dispatched_when_its_lease_expires_then_it_is_dispatched_again_with_the_attempt_unspent() {
        let snapshot = Snapshot { state: state_of(StateKind::Dispatched), attempt: 2 };
        let moved = apply(snapshot, Command::Expire { reason: "lease of worker w1 expired".into(), retry_at: None }, now()).unwrap();
        assert_eq!((moved.state.kind(), moved.attempt), (StateKind::Created, 2));
        assert_eq!(moved.reason, "lease of worker w1 expired before the attempt started; dispatched again");
    }

    #[test]
    fn given_running_when_its_lease_expires_then_the_attempt_is_spent() {
        let snapshot = Snapshot { state: state_of(StateKind::Running), attempt: 1 };
        let moved = apply(snapshot, Command::Expire { reason: "lease expired".into(), retry_at: None }, now()).unwrap();
        assert_eq!(moved.state.kind(), StateKind::Failed);
    }

    #[test]
    fn given_retrying_when_the_next_attempt_begins_then_the_attempt_counts_up() {
        let snapshot = Snapshot { state: state_of(StateKind::Retrying), attempt: 1 };
        let moved = apply(snapshot, Command::NextAttempt, now()).unwrap();
        assert_eq!(moved.state.kind(), StateKind::Created);
        assert_eq!(moved.attempt, 2);
    }

    #[test]
    fn given_running_when_it_fails_with_a_retry_due_then_it_is_retrying() {
        let due = now() + TimeDelta::seconds(30);
        let snapshot = Snapshot { state: state_of(StateKind::Running), attempt: 1 };
        let moved = apply(
            snapshot,
            Command::Fail { attempt: 1, worker_id: worker("w1"), reason: "exit code 1".into(), retry_at: Some(due) },
            now(),
        )
        .unwrap();
        assert_eq!(moved.state, InstanceState::Retrying(Retrying { next_attempt_at: due }));
        assert_eq!(moved.reason, "exit code 1");
    }

    #[test]
    fn given_created_when_split_into_no_shards_then_it_is_refused() {
        let snapshot = Snapshot { state: state_of(StateKind::Created), attempt: 1 };
        assert!(apply(snapshot, Command::FanOut { total: 0 }, now()).is_err());
    }

    #[test]
    fn given_sharded_when_settled_as_a_non_final_state_then_it_is_refused() {
        let snapshot = Snapshot { state: state_of(StateKind::Sharded), attempt: 1 };
        let err = apply(snapshot, Command::Settle { outcome: StateKind::Running, reason: String::new() }, now()).unwrap_err();
        assert_eq!(err, TransitionError::Illegal { command: "settle", state: StateKind::Sharded });
    }

    #[test]
    fn names_round_trip() {
        for kind in StateKind::ALL {
            assert_eq!(StateKind::parse(kind.as_str()), Some(kind));
            assert_eq!(StateKind::parse(kind.token()), Some(kind));
        }
    }
}
