//! Invariant 1: a transition committed in MySQL reaches AX_EVENTS exactly once, even
//! when the relay dies between publish and delete, or NATS is away for a while.

use std::time::Duration;

use ax_domain::event::EventBody;
use ax_domain::state::Command;
use ax_store::{NewInstance, TransitionRequest};
use ax_tests::proxy::Proxy;
use ax_tests::{eventually, new_instance, stream_events, TestEnv};
use serde_json::json;

async fn make_instances(env: &TestEnv, n: usize) -> Vec<ax_domain::ids::InstanceId> {
    let task = env.register(json!({"task_name": "relayed", "owner": "tests", "execution": {"handler": "noop"}})).await;
    let batch: Vec<NewInstance> = (0..n)
        .map(|i| new_instance(&task, &format!("t{i}")))
        .collect();
    env.store.create_instances(&batch).await.unwrap().into_iter().map(|o| o.instance_id().clone()).collect()
}

async fn dispatch_all(env: &TestEnv, ids: &[ax_domain::ids::InstanceId]) {
    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let requests: Vec<TransitionRequest> = ids
        .iter()
        .map(|id| TransitionRequest {
            instance_id: id.clone(),
            command: Command::Dispatch { worker_id: "w1".parse().unwrap(), lease_expires_at: lease },
            operator: "test".into(),
            result: None,
        })
        .collect();
    assert!(env.store.transition(&requests).await.unwrap().iter().all(Result::is_ok));
}

fn deps(env: &TestEnv, bus: ax_bus::Bus) -> ax_scheduler::Deps {
    ax_scheduler::Deps { store: env.store.clone(), bus, queues: env.queues.clone() }
}

#[tokio::test]
async fn a_relay_killed_between_publish_and_delete_publishes_each_event_once() {
    let env = TestEnv::new().await;
    let ids = make_instances(&env, 20).await;
    dispatch_all(&env, &ids).await;
    // The first relay publishes everything and "dies" before deleting anything.
    let (batches, damaged) = env.store.outbox_pending(1000).await.unwrap();
    assert!(damaged.is_empty());
    let rows: usize = batches.iter().map(|b| b.events.len()).sum();
    let task_events = 1;
    assert_eq!(rows, 40 + task_events);
    assert_eq!(batches.len(), 3, "one outbox row per commit: the registration, the creation, the dispatch");
    let (acked, failure) = ax_scheduler::relay::publish(&deps(&env, env.bus.clone()), &batches).await;
    assert!(failure.is_none());
    assert_eq!(acked.len(), batches.len());
    // A new relay finds the same rows and publishes them again.
    let republished = ax_scheduler::relay::pass(&deps(&env, env.bus.clone())).await.unwrap();
    assert_eq!(republished, rows);
    assert!(env.store.outbox_pending(10).await.unwrap().0.is_empty());

    let events = stream_events(&env).await;
    assert_eq!(events.len(), rows, "the duplicate window dropped every republish");
    let mut ids_seen = std::collections::HashSet::new();
    for (_, event) in &events {
        assert!(ids_seen.insert(event.id.clone()), "event {} twice", event.id);
    }
    env.cleanup().await;
}

#[tokio::test]
async fn events_committed_while_nats_is_unreachable_arrive_afterwards_in_order() {
    let env = TestEnv::new().await;
    let nats: std::net::SocketAddr = ax_tests::nats_url().trim_start_matches("nats://").parse().expect("NATS URL is host:port");
    let proxy = Proxy::start(nats).await;
    let relay_bus = ax_bus::Bus::connect(&format!("nats://{}", proxy.addr), env.names.clone(), "relay-under-test").await.unwrap();
    let relay = ax_tests::Service::spawn({
        let deps = deps(&env, relay_bus);
        move |token| ax_scheduler::relay::run(deps, Duration::from_millis(50), token)
    });

    let ids = make_instances(&env, 10).await;
    eventually(Duration::from_secs(10), "first events published", || async {
        env.store.outbox_pending(1).await.unwrap().0.is_empty().then_some(())
    })
    .await;

    proxy.down();
    dispatch_all(&env, &ids).await;
    let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
    let starts: Vec<TransitionRequest> = ids
        .iter()
        .map(|id| TransitionRequest {
            instance_id: id.clone(),
            command: Command::Start { attempt: 1, worker_id: "w1".parse().unwrap(), lease_expires_at: lease, deadline_at: lease },
            operator: "test".into(),
            result: None,
        })
        .collect();
    env.store.transition(&starts).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stuck = env.store.outbox_events().await.unwrap().len();
    assert_eq!(stuck, 20, "nothing is published or dropped while NATS is unreachable");

    proxy.up();
    eventually(Duration::from_secs(30), "the backlog to drain after NATS returns", || async {
        env.store.outbox_pending(1).await.unwrap().0.is_empty().then_some(())
    })
    .await;
    relay.stop().await;

    let events = stream_events(&env).await;
    let transitions: Vec<_> = events
        .iter()
        .filter_map(|(_, e)| match &e.body {
            EventBody::InstanceTransitioned(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(transitions.len(), 30, "every committed transition arrived exactly once");
    for id in &ids {
        let seqs: Vec<u32> = transitions.iter().filter(|t| &t.instance_id == id).map(|t| t.seq).collect();
        assert_eq!(seqs, [1, 2, 3], "per-instance order of {id}");
    }
    env.cleanup().await;
}

/// The migration to one outbox row per commit moves events still waiting in the old
/// table; what it writes in SQL must decode like what AX writes.
#[tokio::test]
async fn events_left_in_the_old_outbox_table_move_over_and_decode() {
    let env = TestEnv::new().await;
    let pool = env.store.pool();
    sqlx::query(
        "CREATE TABLE outbox (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, event_id CHAR(30) NOT NULL, subject VARCHAR(255) NOT NULL, \
         task_name VARCHAR(64) NOT NULL, instance_id CHAR(30) NULL, state VARCHAR(16) NULL, payload MEDIUMBLOB NOT NULL, \
         created_at DATETIME(6) NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    )
    .execute(pool)
    .await
    .unwrap();
    let payload: Vec<u8> = vec![0xa1, b',', b':', 0, 0xff, b'7'];
    for (event_id, subject, instance, state) in [
        ("e1", "ax.event.task.t.registered", None, None),
        ("e2", "ax.event.instance.t.created", Some("i1"), Some("CREATED")),
    ] {
        sqlx::query("INSERT INTO outbox (event_id, subject, task_name, instance_id, state, payload, created_at) VALUES (?, ?, 't', ?, ?, ?, UTC_TIMESTAMP(6))")
            .bind(event_id)
            .bind(subject)
            .bind(instance)
            .bind(state)
            .bind(&payload)
            .execute(pool)
            .await
            .unwrap();
    }
    let migration = include_str!("../../migrations/20261203000000_outbox_batches.sql");
    let statements: Vec<&str> = migration.split(';').filter(|s| s.contains("INSERT INTO outbox_batches") || s.contains("DROP TABLE outbox")).collect();
    assert_eq!(statements.len(), 2, "the migration moves the rows, then drops the old table");
    for statement in statements {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
    let moved: Vec<_> = env.store.outbox_events().await.unwrap().into_iter().filter(|e| e.task_name == "t").collect();
    assert_eq!(moved.len(), 2);
    assert_eq!((moved[0].event_id.as_str(), moved[0].instance_id.as_deref(), moved[0].state.as_deref()), ("e1", None, None));
    assert_eq!(moved[0].subject, "ax.event.task.t.registered");
    assert_eq!((moved[1].event_id.as_str(), moved[1].instance_id.as_deref(), moved[1].state.as_deref()), ("e2", Some("i1"), Some("CREATED")));
    assert!(moved.iter().all(|e| e.payload == payload));
    env.cleanup().await;
}
