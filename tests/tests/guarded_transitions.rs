//! The store's guarded transition and registration under concurrency, on real MySQL.

use std::sync::Arc;

use ax_domain::ids::InstanceId;
use ax_domain::state::{Command, StateKind};
use ax_store::{CreateOutcome, NewInstance, TransitionRequest};
use ax_tests::{new_instance, TestEnv};
use serde_json::json;

fn noop_task(name: &str) -> serde_json::Value {
    json!({"task_name": name, "owner": "tests", "execution": {"handler": "noop"}})
}

/// A transition asked for by the test.
fn request(id: &InstanceId, command: Command) -> TransitionRequest {
    TransitionRequest { instance_id: id.clone(), command, operator: "test".into(), result: None }
}

/// Creates `batch`, every one of them new, and returns their ids in order.
async fn create_all(env: &TestEnv, batch: &[NewInstance]) -> Vec<InstanceId> {
    env.store
        .create_instances(batch)
        .await
        .unwrap()
        .into_iter()
        .map(|c| match c {
            CreateOutcome::Created(id) => id,
            other => panic!("expected a new instance, got {other:?}"),
        })
        .collect()
}

async fn count(env: &TestEnv, sql: &'static str, id: &str) -> i64 {
    sqlx::query_scalar(sql).bind(id).fetch_one(env.store.pool()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_dispatches_of_one_instance_have_one_winner() {
    let env = Arc::new(TestEnv::new().await);
    let task = env.register(noop_task("contended")).await;
    let created = env.store.create_instances(&[new_instance(&task, "t-1")]).await.unwrap();
    let CreateOutcome::Created(id) = created[0].clone() else { panic!("expected a new instance") };

    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let mut attempts = Vec::new();
    for n in 0..50 {
        let env = env.clone();
        let id = id.clone();
        attempts.push(tokio::spawn(async move {
            let request = TransitionRequest {
                instance_id: id,
                command: Command::Dispatch { worker_id: format!("w{n}").parse().unwrap(), lease_expires_at: lease },
                operator: "test".into(),
                result: None,
            };
            env.store.transition(&[request]).await.unwrap().remove(0)
        }));
    }
    let mut winners = 0;
    for attempt in attempts {
        if attempt.await.unwrap().is_ok() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1, "exactly one guarded transition wins");
    let id = id.as_str();
    assert_eq!(count(&env, "SELECT COUNT(*) FROM instance_transitions WHERE instance_id = ? AND to_state = 'DISPATCHED'", id).await, 1);
    let outbox = env.store.outbox_events().await.unwrap();
    assert_eq!(outbox.iter().filter(|e| e.instance_id.as_deref() == Some(id) && e.state.as_deref() == Some("DISPATCHED")).count(), 1);
    let instance = env.store.instance(&id.parse().unwrap()).await.unwrap().unwrap();
    assert_eq!(instance.state.kind(), StateKind::Dispatched);
    assert_eq!(instance.seq, 2);
    Arc::try_unwrap(env).ok().unwrap().cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_registrations_of_one_task_each_get_a_version() {
    let env = Arc::new(TestEnv::new().await);
    let mut handles = Vec::new();
    for owner in ["team_a", "team_b"] {
        let env = env.clone();
        handles.push(tokio::spawn(async move {
            let mut def = noop_task("raced");
            def["owner"] = json!(owner);
            env.register(def).await.version
        }));
    }
    let mut versions = Vec::new();
    for handle in handles {
        versions.push(handle.await.unwrap());
    }
    versions.sort();
    assert_eq!(versions, [1, 2], "no registration lost");
    let stored: Vec<u32> = sqlx::query_scalar("SELECT version FROM task_versions ORDER BY version").fetch_all(env.store.pool()).await.unwrap();
    assert_eq!(stored, [1, 2]);
    // The same definition again changes nothing.
    let current = env.store.task("raced").await.unwrap().unwrap();
    let again = env.store.register_task(&current.definition, "test").await.unwrap();
    assert_eq!((again.task.version, again.action), (2, None));
    Arc::try_unwrap(env).ok().unwrap().cleanup().await;
}

#[tokio::test]
async fn one_trigger_id_creates_one_instance_even_within_a_batch() {
    let env = TestEnv::new().await;
    let task = env.register(noop_task("dedup")).await;
    let batch = [new_instance(&task, "same"), new_instance(&task, "same"), new_instance(&task, "other")];
    let first = env.store.create_instances(&batch).await.unwrap();
    assert!(matches!(first[0], CreateOutcome::Created(_)));
    assert_eq!(first[1], CreateOutcome::Duplicate(first[0].instance_id().clone()));
    assert!(matches!(first[2], CreateOutcome::Created(_)));
    let again = env.store.create_instances(&batch[..1]).await.unwrap();
    assert_eq!(again[0], CreateOutcome::Duplicate(first[0].instance_id().clone()));
    // A batch mixing a claimed trigger id with a new one: the old owner stays, the
    // new id is claimed.
    let mixed = env.store.create_instances(&[new_instance(&task, "new"), new_instance(&task, "same")]).await.unwrap();
    assert!(matches!(mixed[0], CreateOutcome::Created(_)), "{mixed:?}");
    assert_eq!(mixed[1], CreateOutcome::Duplicate(first[0].instance_id().clone()));
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances").fetch_one(env.store.pool()).await.unwrap();
    assert_eq!(total, 3);
    let claims: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instance_triggers").fetch_one(env.store.pool()).await.unwrap();
    assert_eq!(claims, 3, "one claim per trigger id");
    env.cleanup().await;
}

#[tokio::test]
async fn a_stale_attempt_cannot_move_an_instance() {
    let env = TestEnv::new().await;
    let task = env.register(noop_task("fenced")).await;
    let id = env.store.create_instances(&[new_instance(&task, "f")]).await.unwrap()[0].instance_id().clone();
    let w1: ax_domain::ids::WorkerId = "w1".parse().unwrap();
    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let step = |command| request(&id, command);
    let applied = env
        .store
        .transition(&[
            step(Command::Dispatch { worker_id: w1.clone(), lease_expires_at: lease }),
            step(Command::Start { attempt: 1, worker_id: w1.clone(), lease_expires_at: lease, deadline_at: lease }),
            step(Command::Expire { reason: "lease expired".into(), retry_at: Some(ax_domain::now()) }),
            step(Command::NextAttempt),
        ])
        .await
        .unwrap();
    assert!(applied.iter().all(Result::is_ok), "{applied:?}");
    // Attempt 1's late success is refused; attempt 2 is untouched.
    let late = env.store.transition(&[step(Command::Succeed { attempt: 1, worker_id: w1 })]).await.unwrap().remove(0);
    assert!(late.is_err());
    let instance = env.store.instance(&id).await.unwrap().unwrap();
    assert_eq!((instance.state.kind(), instance.attempt, instance.seq), (StateKind::Created, 2, 5));
    let trail = env.store.transitions(&id).await.unwrap();
    let seqs: Vec<u32> = trail.iter().map(|t| t.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!(trail[3].reason, "lease expired");
    env.cleanup().await;
}

/// A misfire catch-up or backfill of thousands: more rows than one statement's
/// 65,535 placeholders allow (18 per instance) still commit as one batch.
#[tokio::test]
async fn a_batch_larger_than_one_statement_allows_is_created_whole() {
    let env = TestEnv::new().await;
    let task = env.register(noop_task("many")).await;
    let batch: Vec<NewInstance> = (0..4000).map(|i| new_instance(&task, &format!("m{i}"))).collect();
    let outcomes = env.store.create_instances(&batch).await.unwrap();
    assert_eq!(outcomes.iter().filter(|o| matches!(o, CreateOutcome::Created(_))).count(), 4000);
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances").fetch_one(env.store.pool()).await.unwrap();
    assert_eq!(total, 4000);
    env.cleanup().await;
}

/// A worker that dies with an assignment queued (prefetched) never started it: the
/// expiry dispatches it again with the attempt unspent, and the dead worker's late
/// RUNNING is refused whether the instance waits or went to another worker.
#[tokio::test]
async fn an_expired_lease_before_running_spends_no_attempt_and_refuses_the_old_holder() {
    let env = TestEnv::new().await;
    let task = env.register(noop_task("unstarted")).await;
    let id = env.store.create_instances(&[new_instance(&task, "u")]).await.unwrap()[0].instance_id().clone();
    let (w1, w2): (ax_domain::ids::WorkerId, ax_domain::ids::WorkerId) = ("w1".parse().unwrap(), "w2".parse().unwrap());
    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let step = |command| request(&id, command);
    let start = |worker: &ax_domain::ids::WorkerId| step(Command::Start { attempt: 1, worker_id: worker.clone(), lease_expires_at: lease, deadline_at: lease });
    let applied = env
        .store
        .transition(&[
            step(Command::Dispatch { worker_id: w1.clone(), lease_expires_at: lease }),
            step(Command::Expire { reason: "lease of worker w1 expired".into(), retry_at: None }),
        ])
        .await
        .unwrap();
    assert!(applied.iter().all(Result::is_ok), "{applied:?}");
    let instance = env.store.instance(&id).await.unwrap().unwrap();
    assert_eq!((instance.state.kind(), instance.attempt), (StateKind::Created, 1));
    assert!(env.store.transition(&[start(&w1)]).await.unwrap().remove(0).is_err(), "not dispatched: nobody may start it");

    env.store.transition(&[step(Command::Dispatch { worker_id: w2.clone(), lease_expires_at: lease })]).await.unwrap().remove(0).unwrap();
    assert!(env.store.transition(&[start(&w1)]).await.unwrap().remove(0).is_err(), "the old holder is refused");
    env.store.transition(&[start(&w2)]).await.unwrap().remove(0).unwrap();
    let trail = env.store.transitions(&id).await.unwrap();
    assert_eq!(trail[2].reason, "lease of worker w1 expired before the attempt started; dispatched again");
    assert_eq!(trail.last().map(|t| (t.to_state.as_str(), t.attempt)), Some(("RUNNING", 1)));
    env.cleanup().await;
}

/// The hot path keeps its connections beside the pool and returns them without a
/// ping: one the server dropped meanwhile (a restart, `KILL`, `wait_timeout`) must
/// be noticed before use, not surface as a failed transition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transitions_go_on_after_mysql_dropped_every_connection() {
    use sqlx::Connection;
    let env = TestEnv::new().await;
    let task = env.register(noop_task("dropped")).await;
    let ids = create_all(&env, &[new_instance(&task, "t-1"), new_instance(&task, "t-2")]).await;
    let dispatch = |id: &InstanceId| {
        request(id, Command::Dispatch { worker_id: "w1".parse().unwrap(), lease_expires_at: ax_domain::now() + chrono::TimeDelta::seconds(30) })
    };
    assert!(env.store.transition(&[dispatch(&ids[0])]).await.unwrap()[0].is_ok());

    let mut admin = sqlx::MySqlConnection::connect(&ax_tests::mysql_server_url()).await.unwrap();
    let victims: Vec<i64> = sqlx::query_scalar("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?")
        .bind(&env.database)
        .fetch_all(&mut admin)
        .await
        .unwrap();
    assert!(!victims.is_empty(), "the store holds connections to its database");
    for id in &victims {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}"))).execute(&mut admin).await;
    }
    admin.close().await.unwrap();
    // A connection idle this long is checked before it is handed out again.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;

    let outcome = env.store.transition(&[dispatch(&ids[1])]).await.expect("a dropped connection is replaced, not used");
    assert!(outcome[0].is_ok());
    let instance = env.store.instance(&ids[1]).await.unwrap().unwrap();
    assert_eq!(instance.state.kind(), StateKind::Dispatched);
    env.cleanup().await;
}

/// The dispatcher's one read before its due read: held counts per worker and the
/// retries whose back-off has passed (and not the ones still waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatch_view_counts_held_instances_and_lists_due_retries() {
    let env = TestEnv::new().await;
    let task = env.register(noop_task("viewed")).await;
    let batch: Vec<_> = (0..5).map(|n| new_instance(&task, &format!("t-{n}"))).collect();
    let ids = create_all(&env, &batch).await;
    let now = ax_domain::now();
    let lease = now + chrono::TimeDelta::seconds(30);
    let worker = |name: &str| -> ax_domain::ids::WorkerId { name.parse().unwrap() };
    // w1 holds two (one RUNNING), w2 one; two of w2's earlier attempts failed, one
    // retry due a second ago, one in a minute.
    let mut requests = Vec::new();
    for (id, w) in [(&ids[0], "w1"), (&ids[1], "w1"), (&ids[2], "w2"), (&ids[3], "w2"), (&ids[4], "w2")] {
        requests.push(request(id, Command::Dispatch { worker_id: worker(w), lease_expires_at: lease }));
    }
    requests.push(request(&ids[0], Command::Start { attempt: 1, worker_id: worker("w1"), lease_expires_at: lease, deadline_at: lease }));
    for (id, retry_at) in [(&ids[3], now - chrono::TimeDelta::seconds(1)), (&ids[4], now + chrono::TimeDelta::seconds(60))] {
        requests.push(request(id, Command::Start { attempt: 1, worker_id: worker("w2"), lease_expires_at: lease, deadline_at: lease }));
        requests.push(request(id, Command::Fail { attempt: 1, worker_id: worker("w2"), reason: "boom".into(), retry_at: Some(retry_at) }));
    }
    for outcome in env.store.transition(&requests).await.unwrap() {
        outcome.expect("every step is legal");
    }

    let mut view = env.store.dispatch_view(ax_domain::now(), 10).await.unwrap();
    view.held.sort();
    assert_eq!(view.held, [("w1".to_owned(), 2), ("w2".to_owned(), 1)]);
    assert_eq!(view.due_retries, [ids[3].clone()]);
    env.cleanup().await;
}
