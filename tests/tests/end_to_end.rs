//! The walking skeleton end to end, through the built `ax` binary: scheduler, api and
//! worker as three processes; a task registered over HTTP, fired by a JSON trigger
//! on NATS, every transition observed as an event.

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use ax_domain::event::{Event, EventBody};
use ax_domain::state::StateKind;
use ax_tests::{eventually, free_port, wait_for_api, AxProcess, TestEnv};
use futures::StreamExt;
use serde_json::{json, Value};

async fn publish_trigger(env: &TestEnv, task: &str, msg_id: &str, body: &[u8]) {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    headers.insert("Content-Type", "application/json");
    env.bus
        .jetstream
        .publish_with_headers(env.names.trigger(task), headers, body.to_vec().into())
        .await
        .expect("trigger published")
        .await
        .expect("trigger stored");
}

async fn next_event(events: &mut async_nats::Subscriber) -> (HeaderMap, Event) {
    let message = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an event within 30 s")
        .expect("subscription open");
    (message.headers.clone().unwrap_or_default(), Event::decode(&message.payload).expect("events decode"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_on_nats_runs_through_every_state_and_each_is_an_event() {
    let env = TestEnv::new().await;
    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let http = [("AX_HTTP_ADDR", format!("127.0.0.1:{port}"))];
    let metrics_port = free_port();
    let _scheduler = AxProcess::spawn(&env, &["scheduler"], &[("AX_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))]);
    let _api = AxProcess::spawn(&env, &["api"], &http);
    let _worker = AxProcess::spawn(&env, &["worker", "--tags", "e2e"], &[]);
    wait_for_api(&api).await;
    let client = reqwest::Client::new();

    // Register over HTTP.
    let definition = json!({
        "task_name": "order_sync",
        "owner": "data_team",
        "execution": {"handler": "shell", "config": {"command": "test \"$AX_TASK\" = order_sync"}, "timeout": 30},
        "dispatch": {"tags": ["e2e"]}
    });
    let response = client.put(format!("{api}/api/v1/tasks/order_sync")).json(&definition).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["version"], 1);

    let mut events = env.bus.client.subscribe(env.names.instance_events_of(Some("order_sync"))).await.unwrap();
    env.bus.client.flush().await.unwrap();

    // A JSON trigger with a Nats-Msg-Id, which becomes its trigger id.
    let started = Instant::now();
    publish_trigger(&env, "order_sync", "order-1", br#"{"params": {"order": 1}}"#).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_event(&mut events).await);
    }
    let elapsed = started.elapsed();
    println!("trigger publish -> SUCCEEDED event: {:.1} ms", elapsed.as_secs_f64() * 1000.0);

    let expected = [StateKind::Created, StateKind::Dispatched, StateKind::Running, StateKind::Succeeded];
    let mut instance_id = None;
    for (i, ((headers, event), state)) in seen.iter().zip(expected).enumerate() {
        let EventBody::InstanceTransitioned(t) = &event.body else { panic!("not an instance event") };
        assert_eq!(t.to, state, "event {i}");
        assert_eq!(t.seq, i as u32 + 1, "sequence numbers are contiguous");
        assert_eq!(t.task, "order_sync");
        assert_eq!(t.trigger_id, "order-1");
        let header = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
        assert_eq!(header("Ax-Event-Id").as_deref(), Some(event.id.as_str()));
        assert_eq!(header("Nats-Msg-Id").as_deref(), Some(event.id.as_str()));
        assert_eq!(header("Ax-Task").as_deref(), Some("order_sync"));
        assert_eq!(header("Ax-Instance").as_deref(), Some(t.instance_id.as_str()));
        assert_eq!(header("Ax-State").as_deref(), Some(state.as_str()));
        instance_id.get_or_insert(t.instance_id.clone());
        assert_eq!(Some(&t.instance_id), instance_id.as_ref());
    }
    let instance_id = instance_id.unwrap();

    // The same trigger id again, by header (dropped by JetStream) and by body (by AX).
    publish_trigger(&env, "order_sync", "order-1", br#"{"params": {"order": 1}}"#).await;
    publish_trigger(&env, "order_sync", "order-1-again", br#"{"trigger_id": "order-1", "params": {"order": 1}}"#).await;
    // A malformed one, then a good one: the bad one is acknowledged and does not block.
    publish_trigger(&env, "order_sync", "garbage-1", b"{this is not json").await;
    publish_trigger(&env, "order_sync", "order-2", br#"{"params": {"order": 2}}"#).await;
    let second = loop {
        let (_, event) = next_event(&mut events).await;
        let EventBody::InstanceTransitioned(t) = event.body else { continue };
        assert_ne!(t.trigger_id, "garbage-1");
        if t.to == StateKind::Succeeded {
            break t;
        }
    };
    assert_eq!(second.trigger_id, "order-2");
    assert_ne!(second.instance_id, instance_id);

    let list: Value = client.get(format!("{api}/api/v1/instances?task=order_sync")).send().await.unwrap().json().await.unwrap();
    let instances = list["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2, "order-1 created one instance however often it came: {list}");

    // Nothing is left pending on the intake consumer: the malformed message was acknowledged.
    let consumer = env.bus.intake_consumer().await.unwrap();
    eventually(Duration::from_secs(10), "the intake consumer to have nothing pending", || {
        let mut consumer = consumer.clone();
        async move {
            let info = consumer.info().await.ok()?;
            (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
        }
    })
    .await;

    // The scheduler counted the one duplicate that reached it (the header duplicate
    // never did: JetStream dropped it).
    let metrics = client.get(format!("http://127.0.0.1:{metrics_port}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "ax_intake_triggers_duplicate_total 1"), "{metrics}");

    // The instance over HTTP, with its audit trail.
    let instance: Value = client.get(format!("{api}/api/v1/instances/{instance_id}")).send().await.unwrap().json().await.unwrap();
    assert_eq!(instance["state"], "SUCCEEDED");
    assert_eq!(instance["attempt"], 1);
    assert!(instance["worker_id"].as_str().is_some());
    let trail: Value = client.get(format!("{api}/api/v1/instances/{instance_id}/transitions")).send().await.unwrap().json().await.unwrap();
    let to: Vec<&str> = trail["transitions"].as_array().unwrap().iter().map(|t| t["to_state"].as_str().unwrap()).collect();
    assert_eq!(to, ["CREATED", "DISPATCHED", "RUNNING", "SUCCEEDED"]);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_task_that_exits_1_ends_failed_with_the_exit_code() {
    let env = TestEnv::new().await;
    let port = free_port();
    let api = format!("http://127.0.0.1:{port}");
    let _scheduler = AxProcess::spawn(&env, &["scheduler"], &[]);
    let _api = AxProcess::spawn(&env, &["api"], &[("AX_HTTP_ADDR", format!("127.0.0.1:{port}"))]);
    let _worker = AxProcess::spawn(&env, &["worker"], &[]);
    wait_for_api(&api).await;
    let client = reqwest::Client::new();
    let definition = json!({
        "task_name": "broken",
        "owner": "tests",
        "execution": {"handler": "shell", "config": {"command": "echo 'disk full' >&2; exit 1"}, "timeout": 30}
    });
    let response = client.put(format!("{api}/api/v1/tasks/broken")).json(&definition).send().await.unwrap();
    assert!(response.status().is_success());
    let fired: Value = client.post(format!("{api}/api/v1/tasks/broken/trigger")).json(&json!({"params": {}})).send().await.unwrap().json().await.unwrap();
    let id = fired["instance_id"].as_str().unwrap().to_owned();
    let instance = eventually(Duration::from_secs(30), "the instance to fail", || {
        let client = client.clone();
        let url = format!("{api}/api/v1/instances/{id}");
        async move {
            let instance: Value = client.get(url).send().await.ok()?.json().await.ok()?;
            (instance["state"] == "FAILED").then_some(instance)
        }
    })
    .await;
    let reason = instance["reason"].as_str().unwrap();
    assert!(reason.contains("exit code 1"), "{reason}");
    assert!(reason.contains("disk full"), "{reason}");
    env.cleanup().await;
}
