//! The comparison behind `ax audit verify`, pure: the transitions MySQL's audit
//! trail holds and those `AX_EVENTS` holds, for one window, instance by instance.
//!
//! Each transition must be in both, once, the same in both (event id, states,
//! attempt, task), in increasing sequence order in the stream, and an instance's
//! sequence numbers must have no holes: from 1 for an instance created inside the
//! window, from the first one seen otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use ax_domain::event::InstanceTransitioned;
use ax_domain::Timestamp;
use ax_store::audit::AuditRow;
use serde::Serialize;

/// Where something was found (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// `AX_EVENTS`.
    Stream,
    /// MySQL's `instance_transitions`.
    Audit,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Stream => "AX_EVENTS",
            Side::Audit => "instance_transitions",
        })
    }
}

/// One thing wrong, naming the instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Problem {
    /// In the audit trail, neither in the stream nor waiting in the outbox.
    MissingFromStream { instance_id: String, seq: u32, event_id: String },
    /// In the stream, not in the audit trail.
    MissingFromAudit { instance_id: String, seq: u32, event_id: String, stream_seq: u64 },
    /// The same transition more than once on one side.
    Duplicate { instance_id: String, seq: u32, side: Side, copies: usize },
    /// The stream holds this transition after a later one of the same instance.
    OutOfOrder { instance_id: String, seq: u32, after_seq: u32, stream_seq: u64 },
    /// Sequence numbers missing from both sides.
    Gap { instance_id: String, from_seq: u32, to_seq: u32 },
    /// Both have the transition but disagree on a field.
    Mismatch { instance_id: String, seq: u32, field: &'static str, stream: String, audit: String },
    /// A message of the stream that does not decode as an AX event.
    Undecodable { stream_seq: u64, subject: String, reason: String },
}

impl Problem {
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            Problem::MissingFromStream { instance_id, .. }
            | Problem::MissingFromAudit { instance_id, .. }
            | Problem::Duplicate { instance_id, .. }
            | Problem::OutOfOrder { instance_id, .. }
            | Problem::Gap { instance_id, .. }
            | Problem::Mismatch { instance_id, .. } => Some(instance_id),
            Problem::Undecodable { .. } => None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::MissingFromStream { instance_id, seq, event_id } => {
                write!(f, "instance {instance_id} seq {seq} ({event_id}): in instance_transitions but missing from AX_EVENTS")
            }
            Problem::MissingFromAudit { instance_id, seq, event_id, stream_seq } => write!(
                f,
                "instance {instance_id} seq {seq} ({event_id}): in AX_EVENTS (stream seq {stream_seq}) but missing from instance_transitions"
            ),
            Problem::Duplicate { instance_id, seq, side, copies } => write!(f, "instance {instance_id} seq {seq}: {copies} copies in {side}"),
            Problem::OutOfOrder { instance_id, seq, after_seq, stream_seq } => {
                write!(f, "instance {instance_id} seq {seq}: in AX_EVENTS after seq {after_seq} (stream seq {stream_seq})")
            }
            Problem::Gap { instance_id, from_seq, to_seq } if from_seq == to_seq => {
                write!(f, "instance {instance_id} seq {from_seq}: missing from both AX_EVENTS and instance_transitions")
            }
            Problem::Gap { instance_id, from_seq, to_seq } => {
                write!(f, "instance {instance_id} seq {from_seq}-{to_seq}: missing from both AX_EVENTS and instance_transitions")
            }
            Problem::Mismatch { instance_id, seq, field, stream, audit } => {
                write!(f, "instance {instance_id} seq {seq}: {field} is {stream:?} in AX_EVENTS but {audit:?} in instance_transitions")
            }
            Problem::Undecodable { stream_seq, subject, reason } => write!(f, "stream seq {stream_seq} on {subject}: not an AX event ({reason})"),
        }
    }
}

/// A transition as the stream holds it.
#[derive(Debug, Clone)]
pub struct StreamTransition {
    pub stream_seq: u64,
    pub event_id: String,
    pub time: Timestamp,
    pub transition: InstanceTransitioned,
}

/// What the comparison needs.
pub struct Inputs<'a> {
    pub audit: &'a [AuditRow],
    pub stream: &'a [StreamTransition],
    /// Events still in the outbox: late, not lost.
    pub pending: &'a HashSet<String>,
    /// Per instance: its creation time (for where its sequence must start).
    pub created_at: &'a HashMap<String, Timestamp>,
    pub since: Timestamp,
}

/// Every problem, instance by instance (sorted by instance id, then sequence),
/// plus how many transitions were only late (still in the outbox).
pub fn compare(inputs: &Inputs<'_>) -> (Vec<Problem>, u64) {
    let mut audit_by: BTreeMap<&str, BTreeMap<u32, Vec<&AuditRow>>> = BTreeMap::new();
    for row in inputs.audit {
        audit_by.entry(row.instance_id.as_str()).or_default().entry(row.seq).or_default().push(row);
    }
    let mut stream_by: BTreeMap<&str, Vec<&StreamTransition>> = BTreeMap::new();
    for event in inputs.stream {
        stream_by.entry(event.transition.instance_id.as_str()).or_default().push(event);
    }
    let instances: BTreeSet<&str> = audit_by.keys().chain(stream_by.keys()).copied().collect();
    let mut problems = Vec::new();
    let mut late = 0;
    let empty_audit = BTreeMap::new();
    let empty_stream = Vec::new();
    for instance in instances {
        let audit = audit_by.get(instance).unwrap_or(&empty_audit);
        let stream = stream_by.get(instance).unwrap_or(&empty_stream);
        let owned = instance.to_owned();

        let mut stream_seqs: BTreeMap<u32, Vec<&StreamTransition>> = BTreeMap::new();
        let mut highest: Option<u32> = None;
        for event in stream {
            let seq = event.transition.seq;
            if let Some(after) = highest.filter(|h| *h > seq) {
                problems.push(Problem::OutOfOrder { instance_id: owned.clone(), seq, after_seq: after, stream_seq: event.stream_seq });
            }
            highest = highest.max(Some(seq));
            stream_seqs.entry(seq).or_default().push(event);
        }
        for (seq, copies) in &stream_seqs {
            if copies.len() > 1 {
                problems.push(Problem::Duplicate { instance_id: owned.clone(), seq: *seq, side: Side::Stream, copies: copies.len() });
            }
        }
        for (seq, rows) in audit {
            if rows.len() > 1 {
                problems.push(Problem::Duplicate { instance_id: owned.clone(), seq: *seq, side: Side::Audit, copies: rows.len() });
            }
        }

        for (seq, rows) in audit {
            let row = rows[0];
            match stream_seqs.get(seq) {
                None if inputs.pending.contains(&row.event_id) => late += 1,
                None => problems.push(Problem::MissingFromStream { instance_id: owned.clone(), seq: *seq, event_id: row.event_id.clone() }),
                Some(events) => mismatches(&owned, row, events[0], &mut problems),
            }
        }
        for (seq, events) in &stream_seqs {
            if !audit.contains_key(seq) {
                let event = events[0];
                problems.push(Problem::MissingFromAudit {
                    instance_id: owned.clone(),
                    seq: *seq,
                    event_id: event.event_id.clone(),
                    stream_seq: event.stream_seq,
                });
            }
        }

        let seen: BTreeSet<u32> = audit.keys().chain(stream_seqs.keys()).copied().collect();
        let (Some(&first), Some(&last)) = (seen.first(), seen.last()) else { continue };
        let born_inside = inputs.created_at.get(instance).is_some_and(|created| *created >= inputs.since);
        let start = if born_inside { 1 } else { first };
        let mut hole: Option<u32> = None;
        for seq in start..=last {
            match (seen.contains(&seq), hole) {
                (false, None) => hole = Some(seq),
                (true, Some(from)) => {
                    problems.push(Problem::Gap { instance_id: owned.clone(), from_seq: from, to_seq: seq - 1 });
                    hole = None;
                }
                _ => {}
            }
        }
    }
    (problems, late)
}

fn mismatches(instance: &str, row: &AuditRow, event: &StreamTransition, problems: &mut Vec<Problem>) {
    let t = &event.transition;
    let mut check = |field: &'static str, stream: String, audit: String| {
        if stream != audit {
            problems.push(Problem::Mismatch { instance_id: instance.to_owned(), seq: row.seq, field, stream, audit });
        }
    };
    check("event_id", event.event_id.clone(), row.event_id.clone());
    check("task", t.task.clone(), row.task_name.clone());
    check("attempt", t.attempt.to_string(), row.attempt.to_string());
    check("from_state", t.from.map(|s| s.as_str().to_owned()).unwrap_or_default(), row.from_state.clone().unwrap_or_default());
    check("to_state", t.to.as_str().to_owned(), row.to_state.clone());
}

#[cfg(test)]
mod tests {
    use ax_domain::ids::{InstanceId, TraceId};
    use ax_domain::state::StateKind;
    use ax_domain::task::TriggerKind;

    use super::*;

    const PATH: [StateKind; 4] = [StateKind::Created, StateKind::Dispatched, StateKind::Running, StateKind::Succeeded];

    fn run(instance: &InstanceId, stream_base: u64) -> (Vec<AuditRow>, Vec<StreamTransition>) {
        let now = ax_domain::now();
        let mut audit = Vec::new();
        let mut stream = Vec::new();
        for (i, to) in PATH.into_iter().enumerate() {
            let seq = i as u32 + 1;
            let from = (i > 0).then(|| PATH[i - 1]);
            let event_id = format!("evt_{}_{seq}", instance.as_str());
            audit.push(AuditRow {
                id: stream_base + i as u64,
                instance_id: instance.as_str().to_owned(),
                seq,
                event_id: event_id.clone(),
                task_name: "t".into(),
                attempt: 1,
                from_state: from.map(|s| s.as_str().to_owned()),
                to_state: to.as_str().to_owned(),
                operator: "test".into(),
                reason: String::new(),
                worker_id: None,
                created_at: now,
            });
            stream.push(StreamTransition {
                stream_seq: stream_base + i as u64,
                event_id,
                time: now,
                transition: InstanceTransitioned {
                    task: "t".into(),
                    task_version: 1,
                    instance_id: instance.clone(),
                    attempt: 1,
                    seq,
                    from,
                    to,
                    operator: "test".into(),
                    reason: String::new(),
                    worker_id: None,
                    trigger_type: TriggerKind::Event,
                    trigger_id: "x".into(),
                    trace_id: TraceId::generate(),
                    shard: None,
                },
            });
        }
        (audit, stream)
    }

    fn check(audit: &[AuditRow], stream: &[StreamTransition], pending: &HashSet<String>, instance: &InstanceId) -> (Vec<Problem>, u64) {
        let since = ax_domain::now() - chrono::TimeDelta::hours(1);
        let created_at: HashMap<String, Timestamp> = [(instance.as_str().to_owned(), ax_domain::now())].into();
        compare(&Inputs { audit, stream, pending, created_at: &created_at, since })
    }

    #[test]
    fn a_clean_run_has_no_problem() {
        let id = InstanceId::generate();
        let (audit, stream) = run(&id, 1);
        assert_eq!(check(&audit, &stream, &HashSet::new(), &id), (vec![], 0));
    }

    #[test]
    fn a_deleted_audit_row_and_a_missing_event_are_named() {
        let id = InstanceId::generate();
        let (mut audit, mut stream) = run(&id, 1);
        audit.remove(1);
        stream.remove(2);
        let (problems, _) = check(&audit, &stream, &HashSet::new(), &id);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(matches!(&problems[0], Problem::MissingFromStream { seq: 3, .. }));
        assert!(matches!(&problems[1], Problem::MissingFromAudit { seq: 2, .. }));
        assert!(problems[0].to_string().contains(id.as_str()), "{}", problems[0]);
    }

    #[test]
    fn an_event_still_in_the_outbox_is_late_not_lost() {
        let id = InstanceId::generate();
        let (audit, mut stream) = run(&id, 1);
        let last = stream.pop().unwrap();
        let pending: HashSet<String> = [last.event_id].into();
        assert_eq!(check(&audit, &stream, &pending, &id), (vec![], 1));
    }

    #[test]
    fn holes_duplicates_order_and_disagreements_are_named() {
        let id = InstanceId::generate();
        let (mut audit, mut stream) = run(&id, 1);
        audit.remove(1);
        stream.remove(1);
        let (problems, _) = check(&audit, &stream, &HashSet::new(), &id);
        assert_eq!(problems, [Problem::Gap { instance_id: id.as_str().to_owned(), from_seq: 2, to_seq: 2 }]);

        let (audit, mut stream) = run(&id, 1);
        stream.swap(1, 2);
        stream.push(stream[0].clone());
        stream[3].transition.to = StateKind::Failed;
        let (problems, _) = check(&audit, &stream, &HashSet::new(), &id);
        assert!(problems.iter().any(|p| matches!(p, Problem::OutOfOrder { seq: 2, after_seq: 3, .. })), "{problems:?}");
        assert!(problems.iter().any(|p| matches!(p, Problem::Duplicate { seq: 1, side: Side::Stream, copies: 2, .. })), "{problems:?}");
        assert!(problems.iter().any(|p| matches!(p, Problem::Mismatch { field: "to_state", .. })), "{problems:?}");
    }
}
