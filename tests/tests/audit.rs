//! Audit: `ax audit verify` passes on a clean run and names the instance when an
//! audit row is deleted by hand or an event is missing from the stream;
//! `ax audit replay` prints a history in order; the audit API pages the trail.

use std::time::Duration;

use axum::http::StatusCode;
use ax_audit::{Problem, ReplayFilter};
use ax_tests::{eventually, TestEnv};
use serde_json::{json, Value};

async fn run_three(env: &TestEnv) -> Vec<ax_domain::ids::InstanceId> {
    env.register(json!({"task_name": "audited", "owner": "t", "execution": {"handler": "noop"}})).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, body) = env.call("POST", "/api/v1/tasks/audited/trigger", Some(json!({}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body["instance_id"].as_str().unwrap().parse::<ax_domain::ids::InstanceId>().unwrap());
    }
    for id in &ids {
        eventually(Duration::from_secs(30), &format!("{id} to succeed"), || async {
            (env.store.instance(id).await.ok()??.state.kind() == ax_domain::state::StateKind::Succeeded).then_some(())
        })
        .await;
    }
    env.outbox_drained().await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_a_clean_run_and_names_the_instance_of_a_deleted_row_or_a_missing_event() {
    let env = TestEnv::new().await;
    let config = env.config(&[]);
    let scheduler = env.start_scheduler(config.clone());
    let worker = env.start_worker(config, vec![("noop", ax_worker::handlers::noop())]);
    let ids = run_three(&env).await;
    worker.stop().await;
    scheduler.stop().await;

    let (code, stdout, stderr) = env.run_ax(&["audit", "verify"], &[]).await;
    assert_eq!(code, 0, "a clean run verifies: {stdout}{stderr}");
    assert!(stdout.starts_with("ok: 12 transitions in instance_transitions, 12 in AX_EVENTS, 3 instances"), "{stdout}");

    // An audit row deleted by hand.
    sqlx::query("DELETE FROM instance_transitions WHERE instance_id = ? AND seq = 2")
        .bind(ids[0].as_str())
        .execute(env.store.pool())
        .await
        .unwrap();
    // An event missing from the stream.
    let mut victim = None;
    ax_audit::replay(&env.bus, &ReplayFilter { instance: Some(ids[1].to_string()), ..Default::default() }, |m| {
        if let Ok(ax_domain::event::Event { body: ax_domain::event::EventBody::InstanceTransitioned(t), .. }) = &m.event
            && t.seq == 3
        {
            victim = Some(m.stream_seq);
        }
    })
    .await
    .unwrap();
    let stream = env.bus.jetstream.get_stream(env.names.stream("AX_EVENTS")).await.unwrap();
    stream.delete_message(victim.expect("the event exists")).await.unwrap();

    let (code, stdout, _) = env.run_ax(&["audit", "verify", "--since", "1h"], &[]).await;
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(&format!("instance {} seq 2", ids[0])) && stdout.contains("missing from instance_transitions"),
        "the deleted audit row is named: {stdout}"
    );
    assert!(stdout.contains(&format!("instance {} seq 3", ids[1])) && stdout.contains("missing from AX_EVENTS"), "the missing event is named: {stdout}");
    assert!(!stdout.contains(ids[2].as_str()), "the untouched instance is fine: {stdout}");
    assert!(stdout.contains("FAILED"), "{stdout}");

    let now = ax_domain::now();
    let report = ax_audit::verify(&env.store, &env.bus, now - chrono::TimeDelta::hours(1), now + chrono::TimeDelta::seconds(1)).await.unwrap();
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report.problems.iter().any(|p| matches!(p, Problem::MissingFromAudit { instance_id, seq: 2, .. } if instance_id == ids[0].as_str())));
    assert!(report.problems.iter().any(|p| matches!(p, Problem::MissingFromStream { instance_id, seq: 3, .. } if instance_id == ids[1].as_str())));

    let (code, stdout, _) = env.run_ax(&["audit", "verify", "--format", "json"], &[]).await;
    assert_eq!(code, 1);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["problems"].as_array().unwrap().len(), 2);
    let (code, _, stderr) = env.run_ax(&["audit", "verify", "--since", "yesterday-ish"], &[]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("--since"), "{stderr}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_prints_history_in_order_and_the_api_pages_the_trail() {
    let env = TestEnv::new().await;
    let config = env.config(&[]);
    let scheduler = env.start_scheduler(config.clone());
    let worker = env.start_worker(config, vec![("noop", ax_worker::handlers::noop())]);
    let ids = run_three(&env).await;

    let (code, stdout, stderr) = env.run_ax(&["audit", "replay", "--instance", ids[1].as_str()], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["body"]["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert!(events.iter().all(|e| e["body"]["instance_id"] == ids[1].as_str()));
    let states: Vec<&str> = events.iter().map(|e| e["body"]["to"].as_str().unwrap()).collect();
    assert_eq!(states, ["CREATED", "DISPATCHED", "RUNNING", "SUCCEEDED"]);

    let (code, stdout, _) = env.run_ax(&["audit", "replay", "--task", "audited", "--since", "1h", "--format", "table"], &[]).await;
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 1 + 12, "a header and 12 transitions: {stdout}");
    assert!(stdout.contains("RUNNING → SUCCEEDED"), "{stdout}");
    let (code, stdout, _) = env.run_ax(&["audit", "replay", "--since", "2999-01-01"], &[]).await;
    assert_eq!((code, stdout.as_str()), (0, ""));
    let (code, _, stderr) = env.run_ax(&["audit", "replay", "--task", "Bad Name"], &[]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--task"), "{stderr}");

    let (status, page) = env.call("GET", "/api/v1/audit?task=audited&since=1h&limit=5", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["transitions"].as_array().unwrap().len(), 5);
    let next = page["next"].as_u64().unwrap();
    let (_, rest) = env.call("GET", &format!("/api/v1/audit?task=audited&since=1h&after={next}&limit=100"), None).await;
    assert_eq!(rest["transitions"].as_array().unwrap().len(), 7);
    assert!(rest["next"].is_null());
    let row = &rest["transitions"][6];
    for field in ["instance_id", "seq", "event_id", "task", "attempt", "from_state", "to_state", "operator", "reason", "created_at"] {
        assert!(!row[field].is_null(), "{field} in {row}");
    }
    let (_, one) = env.call("GET", &format!("/api/v1/audit?instance={}", ids[0]), None).await;
    assert_eq!(one["transitions"].as_array().unwrap().len(), 4);
    for (query, field) in [("since=soon", "since"), ("task=Bad", "task"), ("instance=x", "instance"), ("limit=0", "limit"), ("since=1h&until=2h", "until")] {
        let (status, body) = env.call("GET", &format!("/api/v1/audit?{query}"), None).await;
        assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{query}");
    }
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}
