//! `ax audit verify`: reads both sides for a window and compares them.
//!
//! The reads are ordered so that work in flight is never reported as lost:
//! 1. MySQL's audit rows of the window;
//! 2. the outbox: an event still there is late, not missing from the stream;
//! 3. the stream, to its end at that moment (so every event that left the outbox
//!    before step 2 is in it);
//! 4. transitions found only in the stream are looked up in MySQL once more, since
//!    they may have been committed after step 1.

use std::collections::{HashMap, HashSet};

use ax_bus::Bus;
use ax_domain::event::EventBody;
use ax_domain::Timestamp;
use ax_store::audit::{AuditQuery, AuditRow};
use ax_store::Store;
use serde::Serialize;

use crate::compare::{compare, Inputs, Problem, StreamTransition};
use crate::replay::{replay, ReplayFilter};
use crate::AuditError;

const PAGE: u32 = 10_000;

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub since: Timestamp,
    pub until: Timestamp,
    pub audit_rows: u64,
    pub stream_events: u64,
    pub instances: u64,
    /// Transitions whose event waits in the outbox (published soon; not a problem).
    pub pending: u64,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Compares the window `[since, until)` of both sides.
///
/// # Errors
/// MySQL or the stream could not be read.
pub async fn verify(store: &Store, bus: &Bus, since: Timestamp, until: Timestamp) -> Result<VerifyReport, AuditError> {
    let mut audit: Vec<AuditRow> = Vec::new();
    let mut after = 0;
    loop {
        let page = store.audit_trail(&AuditQuery { since, until, task: None, instance: None, after, limit: PAGE }).await?;
        let full = page.len() == PAGE as usize;
        after = page.last().map_or(after, |r| r.id);
        audit.extend(page);
        if !full {
            break;
        }
    }
    let pending = store.outbox_event_ids().await?;

    let mut stream: Vec<StreamTransition> = Vec::new();
    let mut undecodable: Vec<Problem> = Vec::new();
    let filter = ReplayFilter { task: None, instance: None, since: Some(since), until: Some(until) };
    replay(bus, &filter, |message| match message.event {
        Ok(event) => {
            if let EventBody::InstanceTransitioned(transition) = event.body {
                stream.push(StreamTransition { stream_seq: message.stream_seq, event_id: event.id.as_str().to_owned(), time: event.time, transition });
            }
        }
        Err(err) => undecodable.push(Problem::Undecodable { stream_seq: message.stream_seq, subject: message.subject, reason: err.to_string() }),
    })
    .await?;

    let mut instance_ids: HashSet<&str> = audit.iter().map(|r| r.instance_id.as_str()).collect();
    instance_ids.extend(stream.iter().map(|s| s.transition.instance_id.as_str()));
    let ids: Vec<&str> = instance_ids.iter().copied().collect();
    let created_at: HashMap<String, Timestamp> = store.instance_seqs(&ids).await?.into_iter().map(|(id, (_, created))| (id, created)).collect();

    let (mut problems, late) = compare(&Inputs { audit: &audit, stream: &stream, pending: &pending, created_at: &created_at, since });
    recheck_missing_from_audit(store, since, until, &mut problems).await?;
    problems.extend(undecodable);
    Ok(VerifyReport {
        since,
        until,
        audit_rows: audit.len() as u64,
        stream_events: stream.len() as u64,
        instances: ids.len() as u64,
        pending: late,
        problems,
    })
}

/// Drops "missing from the audit trail" findings whose row is there now (its
/// transaction committed after the first read).
async fn recheck_missing_from_audit(store: &Store, since: Timestamp, until: Timestamp, problems: &mut Vec<Problem>) -> Result<(), AuditError> {
    let suspects: HashSet<String> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::MissingFromAudit { instance_id, .. } => Some(instance_id.clone()),
            _ => None,
        })
        .collect();
    let mut present: HashSet<(String, u32)> = HashSet::new();
    for instance in suspects {
        let rows = store
            .audit_trail(&AuditQuery { since, until, task: None, instance: Some(instance.clone()), after: 0, limit: PAGE })
            .await?;
        present.extend(rows.into_iter().map(|r| (r.instance_id, r.seq)));
    }
    problems.retain(|p| match p {
        Problem::MissingFromAudit { instance_id, seq, .. } => !present.contains(&(instance_id.clone(), *seq)),
        _ => true,
    });
    Ok(())
}
