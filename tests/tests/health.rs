//! The task health report (seed 6): it flags a task that failed three times in a
//! row and one that never fired; the monthly run publishes it as an event and
//! sends it to the channels that take reports.

use std::time::Duration;

use axum::http::StatusCode;
use ax_domain::event::EventBody;
use ax_tests::webhook::WebhookReceiver;
use ax_tests::{eventually, stream_events, TestEnv};
use ax_worker::{handler_fn, TaskContext, TaskError};
use serde_json::{json, Value};

async fn run(env: &TestEnv, task: &str, times: usize) {
    for _ in 0..times {
        let (status, body) = env.call("POST", &format!("/api/v1/tasks/{task}/trigger"), Some(json!({}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id: ax_domain::ids::InstanceId = body["instance_id"].as_str().unwrap().parse().unwrap();
        // One after the other, so "in a row" has an order.
        eventually(Duration::from_secs(30), &format!("{id} to finish"), || async {
            env.store.instance(&id).await.ok()??.state.kind().is_final().then_some(())
        })
        .await;
    }
}

fn flags(report: &Value, task: &str) -> Vec<String> {
    let entry = report["tasks"].as_array().unwrap().iter().find(|t| t["task"] == task).unwrap_or_else(|| panic!("{task} not in {report}"));
    entry["flags"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_owned()).collect()
}

async fn scenario(env: &TestEnv) -> (ax_tests::Service, ax_tests::Service) {
    env.register(json!({"task_name": "h_failing", "owner": "team_red", "execution": {"handler": "bad"}})).await;
    env.register(json!({"task_name": "h_never", "owner": "team_blue", "execution": {"handler": "good"}})).await;
    env.register(json!({"task_name": "h_fine", "owner": "team_green", "execution": {"handler": "good"}})).await;
    let config = env.config(&["--health-report-cron", "off", "--monitor-interval", "300ms"]);
    let scheduler = env.start_scheduler(config.clone());
    let worker = env.start_worker(
        config,
        vec![
            ("good", handler_fn(|_ctx: TaskContext| async { Ok(None) })),
            ("bad", handler_fn(|_ctx: TaskContext| async { Err(TaskError::abort("broken")) })),
        ],
    );
    run(env, "h_fine", 2).await;
    run(env, "h_failing", 3).await;
    (scheduler, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_flags_three_failures_in_a_row_and_a_task_that_never_fired() {
    let env = TestEnv::new().await;
    let (scheduler, worker) = scenario(&env).await;

    let (status, report) = env.call("GET", "/api/v1/reports/health?since=7d", None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["tasks_total"], 3);
    assert_eq!(report["tasks_flagged"], 2);
    assert!(flags(&report, "h_failing").contains(&"failing_in_a_row".to_owned()), "{report}");
    assert_eq!(flags(&report, "h_never"), ["never_fired"]);
    assert!(flags(&report, "h_fine").is_empty(), "{report}");
    let failing = report["tasks"].as_array().unwrap().iter().find(|t| t["task"] == "h_failing").unwrap();
    assert_eq!(failing["owner"], "team_red");
    assert_eq!(failing["failure_streak"], 3);
    assert_eq!(failing["failed"], 3);
    assert_eq!(failing["success_rate"], 0.0);
    let fine = report["tasks"].as_array().unwrap().iter().find(|t| t["task"] == "h_fine").unwrap();
    assert_eq!((fine["succeeded"].as_u64(), fine["success_rate"].as_f64()), (Some(2), Some(1.0)));

    // A stricter streak threshold no longer flags three failures.
    let (_, strict) = env.call("GET", "/api/v1/reports/health?since=7d&failure_streak=4", None).await;
    assert!(!flags(&strict, "h_failing").contains(&"failing_in_a_row".to_owned()));
    let (status, body) = env.call("GET", "/api/v1/reports/health?duration_factor=0.5", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("duration_factor")));

    // The CLI, through a real api.
    let port = ax_tests::free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let _api = ax_tests::AxProcess::spawn(&env, &["api"], &[("AX_HTTP_ADDR", format!("127.0.0.1:{port}"))]);
    ax_tests::wait_for_api(&api_url).await;
    let (code, stdout, stderr) = env.run_ax(&["report", "health", "--since", "7d"], &[("AX_API_URL", api_url)]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2 of 3 tasks need attention"), "{stdout}");
    let failing_row = stdout.lines().find(|l| l.starts_with("h_failing")).unwrap();
    assert!(failing_row.contains("team_red") && failing_row.contains("failing_in_a_row"), "{failing_row}");
    let never_row = stdout.lines().find(|l| l.starts_with("h_never")).unwrap();
    assert!(never_row.contains("never") && never_row.contains("never_fired"), "{never_row}");

    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monthly_run_publishes_the_report_as_an_event_and_sends_it_to_report_channels() {
    let env = TestEnv::new().await;
    let receiver = WebhookReceiver::start(0).await;
    let (status, _) = env
        .call("PUT", "/api/v1/alert-channels/reports", Some(json!({"name": "reports", "format": "generic", "url": receiver.url, "levels": [], "reports": true})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (scheduler, worker) = scenario(&env).await;
    let config = env.config(&["--health-report-cron", "off", "--monitor-interval", "300ms"]);
    let monitor = env.start_monitor(config.clone());

    // The fire the report answers: the next monthly one, reached early.
    let schedule = ax_domain::cron_expr::CronSchedule::parse("0 9 1 * *", "UTC").unwrap();
    let fire = schedule.next_after(ax_domain::now()).unwrap();
    let id = ax_monitor::health::make(&env.store, &config, fire).await.unwrap().expect("a report is made");
    assert_eq!(ax_monitor::health::make(&env.store, &config, fire).await.unwrap(), None, "one report per fire, however many monitors");

    let delivered = eventually(Duration::from_secs(30), "the report at its channel", || async { receiver.accepted().first().cloned() }).await;
    assert_eq!(delivered.body["type"], "health_report");
    assert_eq!(delivered.body["report_id"], id.as_str());
    assert_eq!(delivered.body["tasks_flagged"], 2);
    let flagged: Vec<&str> = delivered.body["flagged"].as_array().unwrap().iter().map(|t| t["task"].as_str().unwrap()).collect();
    assert!(flagged.contains(&"h_failing") && flagged.contains(&"h_never"), "{flagged:?}");

    env.outbox_drained().await;
    let events = stream_events(&env).await;
    let reported = events
        .iter()
        .find_map(|(headers, e)| match &e.body {
            EventBody::HealthReported(r) => Some((headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()), r.clone())),
            _ => None,
        })
        .expect("a HealthReported event on AX_EVENTS");
    assert_eq!(reported.1.report_id, id);
    assert_eq!(reported.1.tasks_flagged, 2);
    assert_eq!(reported.1.until, fire);
    assert_eq!(reported.1.since, schedule.previous_before(fire).unwrap());
    assert!(reported.0.is_some());
    let published: Vec<String> = events.iter().filter(|(_, e)| matches!(e.body, EventBody::HealthReported(_))).map(|(h, _)| h.get("Ax-Event-Id").map(|v| v.as_str().to_owned()).unwrap_or_default()).collect();
    assert_eq!(published.len(), 1, "published once");

    let (status, stored) = env.call("GET", &format!("/api/v1/reports/health/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(stored["tasks_total"], 3);
    let (_, list) = env.call("GET", "/api/v1/reports", None).await;
    assert_eq!(list["health"][0]["id"], id.as_str());

    monitor.stop().await;
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}
