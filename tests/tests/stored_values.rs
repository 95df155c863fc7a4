//! What a trigger, a task's parameters, an operator or a reason carries is stored
//! byte for byte and never read as SQL, whatever quotes, backslashes or control
//! characters it holds: through creation, guarded transitions, the audit trail and
//! the outbox.

use ax_domain::state::{Command, StateKind};
use ax_store::{CreateOutcome, TransitionRequest};
use ax_tests::{new_instance, TestEnv};
use serde_json::json;

/// Values that would end a quoted literal, escape it, or break a line.
const NASTY: &[&str] = &[
    "it's",
    "back\\slash at the end\\",
    "'); DROP TABLE instances; --",
    "\\'; SELECT 1; -- ",
    "line\nbreak\r\ttab",
    "nul \u{0} inside",
    "unicode ✓ 日本 \u{1F600}",
    "%_ like wildcards",
    "",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_with_quotes_backslashes_and_control_characters_round_trip() {
    let env = TestEnv::new().await;
    let task = env.register(json!({"task_name": "literals", "owner": "tests", "execution": {"handler": "noop"}})).await;

    // Trigger ids are printable ASCII: the ones that can hold quotes and backslashes.
    let trigger_ids = ["it's-1", "back\\slash-2\\", "');DROP-3", "\\'--4"];
    let mut batch = Vec::new();
    for (i, trigger_id) in trigger_ids.iter().enumerate() {
        let mut new = new_instance(&task, trigger_id);
        new.params = json!({ "nasty": NASTY, "index": i, "nested": { "quote": "\"'\\" } });
        new.operator = format!("op {}", NASTY[i]);
        batch.push(new);
    }
    let created = env.store.create_instances(&batch).await.unwrap();
    // Again: every trigger id is found by its exact bytes, so all are duplicates.
    let again = env.store.create_instances(&batch).await.unwrap();
    let mut ids = Vec::new();
    for ((first, second), new) in created.iter().zip(&again).zip(&batch) {
        let CreateOutcome::Created(id) = first else { panic!("expected a new instance for {:?}, got {first:?}", new.trigger_id) };
        assert_eq!(second, &CreateOutcome::Duplicate(id.clone()), "trigger id {:?}", new.trigger_id);
        let stored = env.store.instance(id).await.unwrap().unwrap();
        assert_eq!(stored.trigger_id, new.trigger_id);
        assert_eq!(stored.params, new.params);
        ids.push(id.clone());
    }

    // Reasons and operators of transitions, through the audit trail and the outbox.
    let worker: ax_domain::ids::WorkerId = "wkr-literals".parse().unwrap();
    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let dispatch: Vec<TransitionRequest> = ids
        .iter()
        .map(|id| TransitionRequest {
            instance_id: id.clone(),
            command: Command::Dispatch { worker_id: worker.clone(), lease_expires_at: lease },
            operator: "scheduler".into(),
            result: None,
        })
        .collect();
    assert!(env.store.transition(&dispatch).await.unwrap().iter().all(Result::is_ok));
    let cancel: Vec<TransitionRequest> = ids
        .iter()
        .zip(NASTY)
        .map(|(id, reason)| TransitionRequest {
            instance_id: id.clone(),
            command: Command::Cancel { reason: (*reason).to_owned() },
            operator: format!("api {reason}"),
            result: None,
        })
        .collect();
    let applied = env.store.transition(&cancel).await.unwrap();
    for ((outcome, id), reason) in applied.iter().zip(&ids).zip(NASTY) {
        assert!(outcome.is_ok(), "cancel of {id}: {outcome:?}");
        let stored = env.store.instance(id).await.unwrap().unwrap();
        assert_eq!(stored.state.kind(), StateKind::Cancelled);
        assert_eq!(stored.reason, *reason);
        let trail = env.store.transitions(id).await.unwrap();
        let last = trail.last().unwrap();
        assert_eq!((last.reason.as_str(), last.operator.clone()), (*reason, format!("api {reason}")));
    }
    let events = env.store.outbox_events().await.unwrap();
    for (id, reason) in ids.iter().zip(NASTY) {
        let event = events
            .iter()
            .find(|e| e.instance_id.as_deref() == Some(id.as_str()) && e.state.as_deref() == Some("CANCELLED"))
            .expect("the cancel's event is in the outbox");
        let decoded = ax_domain::event::Event::decode(&event.payload).unwrap();
        let ax_domain::event::EventBody::InstanceTransitioned(body) = decoded.body else { panic!("not a transition event") };
        assert_eq!(body.reason, *reason);
    }
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances").fetch_one(env.store.pool()).await.unwrap();
    assert_eq!(count, trigger_ids.len() as i64, "nothing but the four instances was written");
    env.cleanup().await;
}
