//! Task logs end to end: the worker SDK's `ctx.log` and the shell handler's output,
//! through AX_LOGS and the log sink into MySQL, read back over the api and with
//! `ax logs`.

use std::time::Duration;

use axum::http::StatusCode;
use ax_domain::log::{LogBatch, LogLevel, LogLine, LogStream};
use ax_tests::{eventually, free_port, wait_for_api, AxProcess, TestEnv};
use ax_worker::{handler_fn, TaskContext};
use serde_json::{json, Value};

async fn trigger(env: &TestEnv, task: &str) -> ax_domain::ids::InstanceId {
    let (status, body) = env.call("POST", &format!("/api/v1/tasks/{task}/trigger"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["instance_id"].as_str().unwrap().parse().unwrap()
}

async fn wait_finished(env: &TestEnv, id: &ax_domain::ids::InstanceId) -> ax_store::InstanceRecord {
    eventually(Duration::from_secs(30), &format!("{id} to finish"), || async {
        let instance = env.store.instance(id).await.ok()??;
        instance.state.kind().is_final().then_some(instance)
    })
    .await
}

async fn wait_lines(env: &TestEnv, id: &ax_domain::ids::InstanceId, at_least: u64) {
    eventually(Duration::from_secs(30), &format!("{at_least} log lines of {id}"), || async {
        (env.store.log_line_count(id).await.ok()? >= at_least).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_lines_arrive_complete_and_in_order() {
    let env = TestEnv::new().await;
    env.register(json!({"task_name": "chatty", "owner": "t", "execution": {"handler": "chatty"}})).await;
    let config = env.config(&["--health-report-cron", "off"]);
    let scheduler = env.start_scheduler(config.clone());
    let sink = env.start_log_sink(config.clone());
    let worker = env.start_worker(
        config,
        vec![(
            "chatty",
            handler_fn(|ctx: TaskContext| async move {
                for i in 0..1000 {
                    ctx.log.info(format!("line {i:04}"));
                }
                Ok(None)
            }),
        )],
    );
    let id = trigger(&env, "chatty").await;
    let instance = wait_finished(&env, &id).await;
    // 1000 from the handler, plus the worker's "started" and "succeeded" notes.
    wait_lines(&env, &id, 1002).await;

    let (status, body) = env.call("GET", &format!("/api/v1/instances/{id}/logs?limit=10000"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let lines = body["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1002);
    assert_eq!(body["more"], false);
    assert_eq!(lines[0]["stream"], "worker");
    assert!(lines[0]["message"].as_str().unwrap().starts_with("attempt 1 started"));
    assert_eq!(lines[1001]["message"], "attempt succeeded");
    let handler: Vec<&Value> = lines.iter().filter(|l| l["stream"] == "handler").collect();
    let messages: Vec<&str> = handler.iter().map(|l| l["message"].as_str().unwrap()).collect();
    let expected: Vec<String> = (0..1000).map(|i| format!("line {i:04}")).collect();
    assert_eq!(messages, expected, "complete and in order");
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence numbers grow");
    for line in &handler {
        assert_eq!(line["instance_id"], id.as_str());
        assert_eq!(line["task"], "chatty");
        assert_eq!(line["attempt"], 1);
        assert_eq!(line["level"], "info");
        assert_eq!(line["trace_id"], instance.trace_id.as_str(), "logs carry the instance's trace id");
        assert!(line["worker_id"].as_str().unwrap().starts_with("wkr_"));
        assert!(line["ts"].is_string());
    }

    // Paging with the cursor reads the same lines.
    let (_, first) = env.call("GET", &format!("/api/v1/instances/{id}/logs?limit=600"), None).await;
    assert_eq!(first["more"], true);
    let next = first["next"].as_str().unwrap();
    let (_, second) = env.call("GET", &format!("/api/v1/instances/{id}/logs?limit=600&after={next}"), None).await;
    assert_eq!(first["lines"].as_array().unwrap().len() + second["lines"].as_array().unwrap().len(), 1002);
    assert_eq!(second["lines"][0]["message"], lines[600]["message"]);

    // Filters, text, and the event stream of a finished instance.
    let (_, warnings) = env.call("GET", &format!("/api/v1/instances/{id}/logs?level=warn"), None).await;
    assert_eq!(warnings["lines"].as_array().unwrap().len(), 0);
    let (status, text) = env.call("GET", &format!("/api/v1/instances/{id}/logs?format=text"), None).await;
    assert_eq!(status, StatusCode::OK);
    let text = text.as_str().unwrap();
    assert_eq!(text.lines().count(), 1002);
    assert!(text.contains("line 0999"));
    let (status, events) = env.call("GET", &format!("/api/v1/instances/{id}/logs?follow=true"), None).await;
    assert_eq!(status, StatusCode::OK);
    let events = events.as_str().unwrap();
    assert_eq!(events.matches("event: line").count(), 1002);
    assert!(events.trim_end().ends_with("data: the instance finished"), "the stream ends after the last line");

    // Bad requests name the field.
    for (query, field) in [("level=loud", "level"), ("limit=0", "limit"), ("after=zzz", "after"), ("format=xml", "format"), ("attempt=0", "attempt")] {
        let (status, body) = env.call("GET", &format!("/api/v1/instances/{id}/logs?{query}"), None).await;
        assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{query}");
    }
    let (status, _) = env.call("GET", "/api/v1/instances/ins_01JDQ6Z8X5C4V9N2M7K3H1G0FF/logs", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The trace id finds the run.
    let (status, trace) = env.call("GET", &format!("/api/v1/traces/{}", instance.trace_id), None).await;
    assert_eq!(status, StatusCode::OK, "{trace}");
    assert_eq!(trace["instance"]["id"], id.as_str());
    assert_eq!(trace["log_lines"], 1002);

    worker.stop().await;
    sink.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_output_becomes_log_lines_that_ax_logs_prints() {
    let env = TestEnv::new().await;
    env.register(json!({
        "task_name": "noisy_shell", "owner": "t",
        "execution": {"handler": "shell", "config": {"command": "echo out-1; echo err-1 >&2; printf 'out-2\\nno newline'; exit 3"}}
    }))
    .await;
    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let _api = AxProcess::spawn(&env, &["api"], &[("AX_HTTP_ADDR", format!("127.0.0.1:{port}"))]);
    let _scheduler = AxProcess::spawn(&env, &["scheduler"], &[]);
    let _worker = AxProcess::spawn(&env, &["worker"], &[]);
    let _sink = AxProcess::spawn(&env, &["log-sink"], &[]);
    wait_for_api(&api_url).await;
    let id = trigger(&env, "noisy_shell").await;
    let instance = wait_finished(&env, &id).await;
    assert!(instance.reason.contains("exit code 3") && instance.reason.contains("err-1"), "{}", instance.reason);
    wait_lines(&env, &id, 6).await;

    let (_, body) = env.call("GET", &format!("/api/v1/instances/{id}/logs"), None).await;
    let output: Vec<(String, String, String)> = body["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["stream"] != "worker")
        .map(|l| (l["stream"].as_str().unwrap().to_owned(), l["level"].as_str().unwrap().to_owned(), l["message"].as_str().unwrap().to_owned()))
        .collect();
    let stdout: Vec<&str> = output.iter().filter(|(s, _, _)| s == "stdout").map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(stdout, ["out-1", "out-2", "no newline"]);
    assert!(output.contains(&("stderr".into(), "warn".into(), "err-1".into())), "{output:?}");

    let api = [("AX_API_URL", api_url.clone())];
    let (code, stdout, stderr) = env.run_ax(&["logs", id.as_str()], &api).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("stdout") && stdout.contains("out-1") && stdout.contains("err-1"), "{stdout}");
    assert!(stdout.contains("attempt failed (may retry): exit code 3"), "{stdout}");
    let (code, stdout, stderr) = env.run_ax(&["logs", id.as_str(), "-f", "--format", "json"], &api).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    let (code, _, stderr) = env.run_ax(&["logs", "not-an-id"], &api).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("not an instance id"), "{stderr}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_log_message_is_terminated_and_counted_and_does_not_block_the_next() {
    let env = TestEnv::new().await;
    let _ = ax_runtime::telemetry::prometheus();
    let sink = env.start_log_sink(env.config(&[]));
    let instance = ax_domain::ids::InstanceId::generate();
    let subject = env.names.log("t", instance.as_str());
    env.bus.jetstream.publish(subject.clone(), "not cbor".into()).await.unwrap().await.unwrap();
    let good = LogBatch {
        v: 1,
        task: "t".into(),
        instance_id: instance.clone(),
        attempt: 1,
        worker_id: "w1".parse().unwrap(),
        trace_id: ax_domain::ids::TraceId::generate(),
        lines: vec![LogLine { seq: 1, ts: ax_domain::now(), level: LogLevel::Info, stream: LogStream::Handler, message: "after the junk".into() }],
    };
    // Published twice, as a redelivery would: stored once.
    for _ in 0..2 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Content-Type", "application/cbor");
        env.bus.jetstream.publish_with_headers(subject.clone(), headers, good.encode().into()).await.unwrap().await.unwrap();
    }
    // A batch whose body names another instance than its subject.
    let mut spoofed = good.clone();
    spoofed.instance_id = ax_domain::ids::InstanceId::generate();
    env.bus.jetstream.publish(subject, spoofed.encode().into()).await.unwrap().await.unwrap();

    env.consumer_idle("AX_LOGS", "ax-log-sink").await;
    assert_eq!(env.store.log_line_count(&instance).await.unwrap(), 1);
    let metrics = ax_runtime::telemetry::prometheus().render();
    assert!(metrics.contains(r#"ax_log_sink_refused_total{reason="malformed"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"ax_log_sink_refused_total{reason="mismatch"} 1"#), "{metrics}");
    assert!(metrics.contains("ax_log_sink_duplicate_lines_total 1"), "{metrics}");
    sink.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn retention_deletes_whole_days_and_keeps_the_rest() {
    let env = TestEnv::new().await;
    let now = ax_domain::now();
    let batch = |instance: &ax_domain::ids::InstanceId, days_ago: i64| LogBatch {
        v: 1,
        task: "t".into(),
        instance_id: instance.clone(),
        attempt: 1,
        worker_id: "w1".parse().unwrap(),
        trace_id: ax_domain::ids::TraceId::generate(),
        lines: (1..=3)
            .map(|seq| LogLine {
                seq,
                ts: now - chrono::TimeDelta::days(days_ago) + chrono::TimeDelta::microseconds(seq as i64),
                level: LogLevel::Info,
                stream: LogStream::Handler,
                message: format!("{days_ago} days ago"),
            })
            .collect(),
    };
    let (old, recent) = (ax_domain::ids::InstanceId::generate(), ax_domain::ids::InstanceId::generate());
    assert_eq!(env.store.insert_log_batches(&[batch(&old, 20), batch(&recent, 2)], now).await.unwrap(), 6);
    let cutoff = ax_log_sink::retention::cutoff(now, 14);
    let deleted = ax_log_sink::retention::pass(&env.store, cutoff, &tokio_util::sync::CancellationToken::new()).await.unwrap();
    assert_eq!(deleted, 3);
    assert_eq!(env.store.log_line_count(&old).await.unwrap(), 0);
    assert_eq!(env.store.log_line_count(&recent).await.unwrap(), 3);
    env.cleanup().await;
}
