//! Execution that never loses or doubles work (issue: leases, fencing, retries,
//! timeouts, guards, priorities, filters, Redis flushes, graceful shutdown).
//! Each test prints what it measured.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_domain::task::TriggerKind;
use ax_domain::trigger::TriggerRequest;
use ax_store::NewInstance;
use ax_tests::{count_in_state, eventually, recording_handler, AxProcess, RunLog, TestEnv};
use serde_json::json;

async fn fire(env: &TestEnv, task: &str, trigger_id: &str, request: TriggerRequest) -> ax_domain::ids::InstanceId {
    let record = env.store.task(task).await.unwrap().unwrap();
    let new = NewInstance::from_trigger(&record, &request, trigger_id.into(), TriggerKind::Event, "test", ax_domain::now());
    let id = env.store.create_instances(&[new]).await.unwrap().remove(0).instance_id().clone();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
    id
}

async fn instance(env: &TestEnv, id: &ax_domain::ids::InstanceId) -> ax_store::InstanceRecord {
    env.store.instance(id).await.unwrap().unwrap()
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

const FAST_LEASE: [&str; 4] = ["--lease", "6s", "--heartbeat-interval", "1s"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_attempt_runs_again_elsewhere_within_the_lease() {
    let env = TestEnv::new().await;
    let counter = std::env::temp_dir().join(format!("{}-attempts", env.namespace));
    let _scheduler = AxProcess::spawn(&env, &["scheduler", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    let mut w1 = AxProcess::spawn(&env, &["worker", "--worker-id", "w1", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    env.register(json!({
        "task_name": "long_job", "owner": "tests",
        "execution": {"handler": "shell", "config": {"command": format!("echo $AX_ATTEMPT >> {}; sleep 20", counter.display())}, "timeout": 120,
            "retry": {"max_attempts": 3, "backoff": "fixed", "initial_interval_sec": 1}}
    }))
    .await;
    let id = fire(&env, "long_job", "once", TriggerRequest::default()).await;
    eventually(Duration::from_secs(20), "attempt 1 running on w1", || async {
        let i = instance(&env, &id).await;
        (i.state.kind() == ax_domain::state::StateKind::Running).then_some(())
    })
    .await;
    let _w2 = AxProcess::spawn(&env, &["worker", "--worker-id", "w2", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    w1.kill().await;
    let rerun = eventually(Duration::from_secs(30), "attempt 2 running on w2", || async {
        let i = instance(&env, &id).await;
        (i.attempt == 2 && i.state.kind() == ax_domain::state::StateKind::Running).then_some(i)
    })
    .await;
    let elapsed = killed.elapsed();
    println!("worker kill -9 -> attempt 2 RUNNING on {} after {:.2} s (lease 6 s)", rerun.last_worker_id.as_ref().unwrap(), elapsed.as_secs_f64());
    assert_eq!(rerun.last_worker_id.as_ref().unwrap().as_str(), "w2");
    assert!(elapsed <= Duration::from_secs(6 + 5), "took {elapsed:?}");
    let attempts = eventually(Duration::from_secs(5), "attempt 2's side effect", || async {
        let text = std::fs::read_to_string(&counter).unwrap_or_default();
        (text.lines().count() >= 2).then_some(text)
    })
    .await;
    assert_eq!(attempts.lines().collect::<Vec<_>>(), ["1", "2"], "the side effect shows exactly the two attempts");
    let reasons: Vec<String> = sqlx::query_scalar("SELECT reason FROM instance_transitions WHERE instance_id = ? AND to_state = 'RETRYING'")
        .bind(id.as_str())
        .fetch_all(env.store.pool())
        .await
        .unwrap();
    assert!(reasons[0].contains("lease of worker w1 expired"), "{reasons:?}");
    let _ = std::fs::remove_file(counter);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_workers_late_report_is_refused() {
    let env = TestEnv::new().await;
    let _scheduler = AxProcess::spawn(&env, &["scheduler", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    let w1 = AxProcess::spawn(&env, &["worker", "--worker-id", "w1", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    env.register(json!({
        "task_name": "short_job", "owner": "tests",
        "execution": {"handler": "shell", "config": {"command": "sleep 3"}, "timeout": 60,
            "retry": {"max_attempts": 2, "backoff": "fixed", "initial_interval_sec": 1}}
    }))
    .await;
    let id = fire(&env, "short_job", "once", TriggerRequest::default()).await;
    eventually(Duration::from_secs(20), "attempt 1 running", || async {
        (instance(&env, &id).await.state.kind() == ax_domain::state::StateKind::Running).then_some(())
    })
    .await;
    let frozen = w1.child.id().unwrap();
    signal(frozen, "STOP");
    let stopped = Instant::now();
    let _w2 = AxProcess::spawn(&env, &["worker", "--worker-id", "w2", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]], &[]);
    let done = eventually(Duration::from_secs(40), "attempt 2 to succeed on w2", || async {
        let i = instance(&env, &id).await;
        (i.attempt == 2 && i.state.kind() == ax_domain::state::StateKind::Succeeded).then_some(i)
    })
    .await;
    println!("frozen worker's attempt taken over and finished by w2 after {:.2} s", stopped.elapsed().as_secs_f64());
    signal(frozen, "CONT");
    // w1 wakes with a finished `sleep 3` to report for attempt 1.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = instance(&env, &id).await;
    assert_eq!((after.state.kind(), after.attempt, after.seq), (done.state.kind(), 2, done.seq), "nothing moved it after the takeover");
    let by_w1_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instance_transitions WHERE instance_id = ? AND operator = 'worker:w1' AND seq > 3")
        .bind(id.as_str())
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(by_w1_after, 0, "w1's late report was refused");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_follow_each_back_off_and_stop_at_max_attempts() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let failing = ax_worker::handler_fn(|_ctx: ax_worker::TaskContext| async { Err(ax_worker::TaskError::retry("always fails")) });
    let worker = env.start_worker(env.config(&[]), vec![("fail", failing)]);
    // Two-second steps, so ±10 % leaves room for a loaded CI machine.
    let cases = [("fixed", [2.0, 2.0]), ("linear", [2.0, 4.0]), ("exp", [2.0, 4.0])];
    let mut ids = Vec::new();
    for (backoff, _) in &cases {
        let name = format!("retry_{backoff}");
        env.register(json!({
            "task_name": name, "owner": "tests",
            "execution": {"handler": "fail", "retry": {"max_attempts": 3, "backoff": backoff, "initial_interval_sec": 2, "max_interval_sec": 60}}
        }))
        .await;
        ids.push(fire(&env, &name, "once", TriggerRequest::default()).await);
    }
    for ((backoff, expected), id) in cases.iter().zip(&ids) {
        let done = eventually(Duration::from_secs(30), "attempts to run out", || async {
            let i = instance(&env, id).await;
            (i.state.kind() == ax_domain::state::StateKind::Failed).then_some(i)
        })
        .await;
        assert_eq!(done.attempt, 3, "{backoff}: attempts stop at max_attempts");
        let trail = env.store.transitions(id).await.unwrap();
        let retried: Vec<_> = trail.iter().filter(|t| t.to_state == "RETRYING").map(|t| t.created_at).collect();
        let next: Vec<_> = trail.iter().filter(|t| t.from_state.as_deref() == Some("RETRYING")).map(|t| t.created_at).collect();
        let intervals: Vec<f64> = retried.iter().zip(&next).map(|(r, n)| (*n - *r).as_seconds_f64()).collect();
        println!("{backoff}: retry intervals {intervals:.3?} s (policy {expected:?})");
        for (got, want) in intervals.iter().zip(expected) {
            assert!((got - want).abs() <= want * 0.1, "{backoff}: {got} s vs {want} s");
        }
        assert!(trail.iter().any(|t| t.to_state == "RETRYING" && t.reason == "always fails"), "the failure is in the audit trail");
    }
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_attempt_is_failed_by_the_scheduler_at_timeout_plus_grace() {
    let env = TestEnv::new().await;
    let _scheduler = AxProcess::spawn(&env, &["scheduler", "--timeout-grace", "2s"], &[]);
    let worker = AxProcess::spawn(&env, &["worker"], &[]);
    env.register(json!({
        "task_name": "stuck", "owner": "tests",
        "execution": {"handler": "shell", "config": {"command": "sleep 60"}, "timeout": 2}
    }))
    .await;
    let id = fire(&env, "stuck", "once", TriggerRequest::default()).await;
    let running = eventually(Duration::from_secs(20), "running", || async {
        let i = instance(&env, &id).await;
        (i.state.kind() == ax_domain::state::StateKind::Running).then_some(i)
    })
    .await;
    // The worker hangs: it will neither stop the command nor report.
    signal(worker.child.id().unwrap(), "STOP");
    let failed = eventually(Duration::from_secs(20), "the scheduler to end it", || async {
        let i = instance(&env, &id).await;
        (i.state.kind() == ax_domain::state::StateKind::Failed).then_some(i)
    })
    .await;
    let after = (failed.finished_at.unwrap() - running.started_at.unwrap()).as_seconds_f64();
    println!("hung attempt ended by the scheduler {after:.2} s after it started (timeout 2 s + grace 2 s)");
    assert!(failed.reason.contains("timed out"), "{}", failed.reason);
    assert!((4.0..8.0).contains(&after), "{after}");
    signal(worker.child.id().unwrap(), "CONT");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_a_backlog_urgent_starts_before_normal_before_low() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    env.register(json!({"task_name": "mixed", "owner": "tests", "execution": {"handler": "record"}})).await;
    let mut expected = std::collections::HashMap::new();
    for i in 0..30 {
        let priority = [ax_domain::task::Priority::Low, ax_domain::task::Priority::Normal, ax_domain::task::Priority::Urgent][i % 3];
        let id = fire(&env, "mixed", &format!("t{i}"), TriggerRequest { priority: Some(priority), ..Default::default() }).await;
        expected.insert(id.as_str().to_owned(), priority);
    }
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&["--max-running", "1"]), vec![("record", recording_handler(log.clone(), 5))]);
    eventually(Duration::from_secs(30), "the backlog to drain", || async { (count_in_state(&env, "mixed", "SUCCEEDED").await == 30).then_some(()) }).await;
    let order: Vec<ax_domain::task::Priority> = log.lock().unwrap().iter().map(|r| expected[&r.0]).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "urgent, then normal, then low");
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tags_versions_and_capacity_decide_who_runs_what() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let plain = env.start_worker(env.config(&["--worker-id", "plain", "--max-running", "2"]), vec![("record", recording_handler(log.clone(), 300))]);
    env.register(json!({"task_name": "gpu_job", "owner": "tests", "execution": {"handler": "record"}, "dispatch": {"tags": ["gpu"]}})).await;
    env.register(json!({"task_name": "future_job", "owner": "tests", "execution": {"handler": "record"}, "min_worker_version": "99.0"})).await;
    env.register(json!({"task_name": "bulk", "owner": "tests", "execution": {"handler": "record"}})).await;
    let gpu = fire(&env, "gpu_job", "g", TriggerRequest::default()).await;
    let future = fire(&env, "future_job", "f", TriggerRequest::default()).await;
    for i in 0..6 {
        fire(&env, "bulk", &format!("b{i}"), TriggerRequest::default()).await;
    }
    let mut most_running = 0;
    for _ in 0..40 {
        let running: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE worker_id = 'plain' AND state IN ('DISPATCHED', 'RUNNING')")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
        most_running = most_running.max(running);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eventually(Duration::from_secs(30), "bulk to finish", || async { (count_in_state(&env, "bulk", "SUCCEEDED").await == 6).then_some(()) }).await;
    assert!(most_running <= 2, "capacity 2, saw {most_running}");
    assert_eq!(instance(&env, &gpu).await.state.kind(), ax_domain::state::StateKind::Created, "no worker has the gpu tag");
    assert_eq!(instance(&env, &future).await.state.kind(), ax_domain::state::StateKind::Created, "no worker is new enough");
    let gpu_worker = env.start_worker(env.config(&["--worker-id", "gpu1", "--tags", "gpu,ssd"]), vec![("record", recording_handler(log.clone(), 0))]);
    let done = eventually(Duration::from_secs(20), "the gpu job once a gpu worker appears", || async {
        let i = instance(&env, &gpu).await;
        (i.state.kind() == ax_domain::state::StateKind::Succeeded).then_some(i)
    })
    .await;
    assert_eq!(done.last_worker_id.unwrap().as_str(), "gpu1");
    assert_eq!(instance(&env, &future).await.state.kind(), ax_domain::state::StateKind::Created);
    plain.stop().await;
    gpu_worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_in_flight_survive_a_redis_flush_and_none_runs_twice() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let w1 = env.start_worker(env.config(&["--max-running", "8"]), vec![("record", recording_handler(log.clone(), 200))]);
    let w2 = env.start_worker(env.config(&["--max-running", "8"]), vec![("record", recording_handler(log.clone(), 200))]);
    let task = env.register(json!({"task_name": "busy", "owner": "tests", "execution": {"handler": "record"}})).await;
    let batch: Vec<NewInstance> = (0..200)
        .map(|i| NewInstance::from_trigger(&task, &TriggerRequest::default(), format!("b{i}"), TriggerKind::Event, "test", ax_domain::now()))
        .collect();
    env.store.create_instances(&batch).await.unwrap();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let client = redis::Client::open(ax_tests::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{}:*", env.namespace)).query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
    let flushed = Instant::now();
    eventually(Duration::from_secs(60), "all 200 to succeed", || async { (count_in_state(&env, "busy", "SUCCEEDED").await == 200).then_some(()) }).await;
    println!("200 instances done {:.2} s after Redis lost {} keys mid-flight", flushed.elapsed().as_secs_f64(), keys.len());
    let runs = log.lock().unwrap().clone();
    let distinct: std::collections::HashSet<_> = runs.iter().map(|r| r.0.clone()).collect();
    assert_eq!((runs.len(), distinct.len()), (200, 200), "each ran exactly once");
    w1.stop().await;
    w2.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_shutting_down_hands_its_work_back_for_at_once_redispatch() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let started = Arc::new(AtomicU32::new(0));
    let patient = {
        let started = started.clone();
        ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
            let started = started.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = ctx.cancellation.cancelled() => Err(ax_worker::TaskError::retry("stopped")),
                    _ = tokio::time::sleep(Duration::from_secs(3)) => Ok(None),
                }
            }
        })
    };
    env.register(json!({"task_name": "handed", "owner": "tests", "execution": {"handler": "patient"}})).await;
    let leaving = env.start_worker(env.config(&["--worker-id", "leaving", "--max-running", "2", "--drain", "500ms"]), vec![("patient", patient.clone())]);
    let a = fire(&env, "handed", "a", TriggerRequest::default()).await;
    let b = fire(&env, "handed", "b", TriggerRequest::default()).await;
    eventually(Duration::from_secs(20), "both running on the leaving worker", || async { (count_in_state(&env, "handed", "RUNNING").await == 2).then_some(()) }).await;
    let staying = env.start_worker(env.config(&["--worker-id", "staying", "--max-running", "2"]), vec![("patient", patient)]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stop = Instant::now();
    leaving.stop().await;
    for id in [&a, &b] {
        let rerun = eventually(Duration::from_secs(10), "the handed-back attempt running on the other worker", || async {
            let i = instance(&env, id).await;
            (i.state.kind() == ax_domain::state::StateKind::Running && i.last_worker_id.as_ref().map(|w| w.as_str()) == Some("staying")).then_some(i)
        })
        .await;
        let after = stop.elapsed();
        println!("{} handed back and running on 'staying' {:.2} s after shutdown began (drain 0.5 s)", rerun.id, after.as_secs_f64());
        assert!(after <= Duration::from_millis(500) + Duration::from_secs(2) + ax_worker::runner::STOP_GRACE, "{after:?}");
        let trail = env.store.transitions(id).await.unwrap();
        assert!(trail.iter().any(|t| t.reason == "handed back by worker"), "handed back, not expired");
        assert_eq!(rerun.attempt, 1, "a hand-back is not a failed attempt");
    }
    staying.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn work_taken_ahead_waits_past_a_lease_without_expiring_and_never_overlaps() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&FAST_LEASE));
    let log = RunLog::default();
    // One slot, one taken ahead; each run outlasts the 6 s lease.
    let worker = env.start_worker(
        env.config(&["--worker-id", "ahead", "--max-running", "1", "--prefetch", "1", FAST_LEASE[0], FAST_LEASE[1], FAST_LEASE[2], FAST_LEASE[3]]),
        vec![("record", recording_handler(log.clone(), 7_000))],
    );
    env.register(json!({"task_name": "long_ones", "owner": "tests", "execution": {"handler": "record", "timeout": 60,
        "retry": {"max_attempts": 1}}}))
    .await;
    let first = fire(&env, "long_ones", "one", TriggerRequest::default()).await;
    let second = fire(&env, "long_ones", "two", TriggerRequest::default()).await;
    let held = eventually(Duration::from_secs(10), "both held by the worker", || async {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE worker_id = 'ahead' AND state IN ('DISPATCHED', 'RUNNING')")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
        (n == 2).then_some(n)
    })
    .await;
    assert_eq!(held, 2, "max_running 1 + prefetch 1");
    eventually(Duration::from_secs(30), "both to succeed", || async {
        (count_in_state(&env, "long_ones", "SUCCEEDED").await == 2).then_some(())
    })
    .await;
    for id in [&first, &second] {
        assert_eq!(instance(&env, id).await.attempt, 1, "the one waiting 7 s behind the other kept its lease");
    }
    let runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), 2);
    let (a, b) = (&runs[0], &runs[1]);
    assert!(b.1 >= a.2 || a.1 >= b.2, "one slot: the runs did not overlap");
    println!("taken ahead: second run started {:.2} s after the first ended", b.1.saturating_duration_since(a.2).as_secs_f64());
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}
