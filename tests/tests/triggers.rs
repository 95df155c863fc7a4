//! Every way a task fires (issue: cron, delay, chain, event) and the concurrency
//! limits, in-process against real MySQL, Redis and NATS.

use std::time::Duration;

use ax_domain::state::StateKind;
use ax_tests::{count_in_state, eventually, percentiles, recording_handler, RunLog, TestEnv};
use futures::StreamExt;
use serde_json::json;

fn millis(t: chrono::DateTime<chrono::Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_per_second_cron_fires_once_per_second() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&[]), vec![("record", recording_handler(log.clone(), 0))]);
    env.register(json!({
        "task_name": "tick", "owner": "tests",
        "triggers": [{"type": "cron", "cron": "* * * * * *"}],
        "execution": {"handler": "record"}
    }))
    .await;
    // Watch a 10-second window that starts after the schedule is surely planned.
    let start = (chrono::Utc::now() + chrono::TimeDelta::seconds(3)).timestamp();
    let end = start + 10;
    tokio::time::sleep(Duration::from_secs((end - chrono::Utc::now().timestamp() + 2) as u64)).await;
    env.store.set_enabled("tick", false, "test").await.unwrap();

    type Row = (String, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>, Option<chrono::DateTime<chrono::Utc>>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT trigger_id, due_at, created_at, started_at FROM instances WHERE task_name = 'tick' AND due_at >= FROM_UNIXTIME(?) AND due_at < FROM_UNIXTIME(?) ORDER BY due_at",
    )
    .bind(start)
    .bind(end)
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    let seconds: Vec<i64> = rows.iter().map(|r| r.1.timestamp()).collect();
    assert_eq!(seconds, (start..end).collect::<Vec<_>>(), "one fire for each second of the window, none twice");
    // A task without a concurrency limit has each fire's instance committed ahead
    // (the planner's window), due at the fire time; it must not start before then.
    let late: Vec<&Row> = rows.iter().filter(|r| r.2 >= r.1).collect();
    assert!(late.is_empty(), "every fire of the window was created ahead of its time: {late:?}");
    let early: Vec<&Row> = rows.iter().filter(|r| r.3.is_none_or(|started| started < r.1)).collect();
    assert!(early.is_empty(), "every fire started, none before its time: {early:?}");
    let mut skew: Vec<f64> = rows.iter().map(|r| millis(r.3.expect("started")) - millis(r.1)).collect();
    let (p50, p99, max) = percentiles(&mut skew);
    println!("cron fire skew over {} fires (fire time -> handler started): p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms", rows.len());
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delayed_triggers_survive_a_redis_flush_and_each_runs_once() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&["--max-running", "32"]), vec![("record", recording_handler(log.clone(), 0))]);
    let task = env.register(json!({"task_name": "later", "owner": "tests", "execution": {"handler": "record"}})).await;
    let request = ax_domain::trigger::TriggerRequest { delay_sec: Some(3), ..Default::default() };
    let now = ax_domain::now();
    let batch: Vec<_> = (0..100)
        .map(|i| ax_store::NewInstance::from_trigger(&task, &request, format!("d{i}"), ax_domain::task::TriggerKind::Delay, "test", now))
        .collect();
    env.store.create_instances(&batch).await.unwrap();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // Everything this namespace holds in Redis goes (a FLUSHALL of our own keys: a
    // real FLUSHALL would also hit tests running in parallel).
    let client = redis::Client::open(ax_tests::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{}:*", env.namespace)).query_async(&mut conn).await.unwrap();
    let pending: Vec<ax_store::FutureDue> = env.store.future_due(ax_domain::now(), 5).await.unwrap();
    assert!(!keys.is_empty(), "the delays were indexed in Redis ({pending:?})");
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();

    eventually(Duration::from_secs(30), "all 100 delayed instances to succeed", || async {
        (count_in_state(&env, "later", "SUCCEEDED").await == 100).then_some(())
    })
    .await;
    let runs = log.lock().unwrap().clone();
    let distinct: std::collections::HashSet<_> = runs.iter().map(|r| r.0.clone()).collect();
    assert_eq!((runs.len(), distinct.len()), (100, 100), "each ran exactly once");
    let lateness: Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT due_at, started_at FROM instances WHERE task_name = 'later'").fetch_all(env.store.pool()).await.unwrap();
    let mut late: Vec<f64> = lateness.iter().map(|(due, started)| millis(*started) - millis(*due)).collect();
    let (p50, p99, max) = percentiles(&mut late);
    println!("delayed start - due, across a Redis flush: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms");
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

async fn fire_twenty(env: &TestEnv, task: &str) {
    let record = env.store.task(task).await.unwrap().unwrap();
    let mut handles = Vec::new();
    for i in 0..20 {
        let store = env.store.clone();
        let record = record.clone();
        handles.push(tokio::spawn(async move {
            let request = ax_domain::trigger::TriggerRequest::default();
            let new = ax_store::NewInstance::from_trigger(&record, &request, format!("t{i}"), ax_domain::task::TriggerKind::Event, "test", ax_domain::now());
            store.create_instances(&[new]).await.unwrap()
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serial_runs_twenty_triggers_one_at_a_time_in_order() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&["--max-running", "8"]), vec![("record", recording_handler(log.clone(), 30))]);
    env.register(json!({
        "task_name": "one_at_a_time", "owner": "tests", "execution": {"handler": "record"},
        "concurrency": {"max_running_instances": 1, "blocking_strategy": "serial"}
    }))
    .await;
    fire_twenty(&env, "one_at_a_time").await;
    eventually(Duration::from_secs(60), "all 20 to succeed", || async {
        (count_in_state(&env, "one_at_a_time", "SUCCEEDED").await == 20).then_some(())
    })
    .await;
    let runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), 20);
    for pair in runs.windows(2) {
        assert!(pair[1].1 >= pair[0].2, "two runs overlapped: {} and {}", pair[0].0, pair[1].0);
    }
    // In the order they were admitted (the audit row of each birth, written under the task lock).
    let admitted: Vec<String> = sqlx::query_scalar("SELECT instance_id FROM instance_transitions WHERE seq = 1 AND task_name = 'one_at_a_time' ORDER BY id")
        .fetch_all(env.store.pool())
        .await
        .unwrap();
    let ran: Vec<String> = runs.iter().map(|r| r.0.clone()).collect();
    assert_eq!(ran, admitted, "FIFO");
    let waited: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT instance_id) FROM instance_transitions WHERE to_state = 'WAITING'")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert!(waited >= 18, "instances waited their turn ({waited})");
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discard_runs_one_of_twenty_and_records_the_rest() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&[]), vec![("record", recording_handler(log.clone(), 500))]);
    env.register(json!({
        "task_name": "only_one", "owner": "tests", "execution": {"handler": "record"},
        "concurrency": {"max_running_instances": 1, "blocking_strategy": "discard"}
    }))
    .await;
    fire_twenty(&env, "only_one").await;
    eventually(Duration::from_secs(30), "the one run to succeed", || async {
        (count_in_state(&env, "only_one", "SUCCEEDED").await == 1).then_some(())
    })
    .await;
    assert_eq!(count_in_state(&env, "only_one", "DISCARDED").await, 19);
    let reason: String = sqlx::query_scalar("SELECT reason FROM instances WHERE task_name = 'only_one' AND state = 'DISCARDED' LIMIT 1")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert!(reason.contains("max_running_instances 1"), "{reason}");
    assert_eq!(log.lock().unwrap().len(), 1);
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_runs_in_order_once_and_refuses_cycles() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let log = RunLog::default();
    let worker = env.start_worker(env.config(&[]), vec![("record", recording_handler(log.clone(), 10))]);
    let chain = ax_tests::Service::spawn({
        let (store, bus) = (env.store.clone(), env.bus.clone());
        move |token| ax_chain::run(store, bus, token)
    });
    let def = |name: &str, after: Option<&str>| {
        let mut d = json!({"task_name": name, "owner": "tests", "execution": {"handler": "record"}});
        if let Some(after) = after {
            d["triggers"] = json!([{"type": "chain", "after": after}]);
        }
        d
    };
    let a = env.register(def("a", None)).await;
    env.register(def("b", Some("a"))).await;
    env.register(def("c", Some("b"))).await;

    let new = ax_store::NewInstance::from_trigger(&a, &Default::default(), "go".into(), ax_domain::task::TriggerKind::Event, "test", ax_domain::now());
    env.store.create_instances(&[new]).await.unwrap();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
    eventually(Duration::from_secs(30), "c to succeed", || async { (count_in_state(&env, "c", "SUCCEEDED").await == 1).then_some(()) }).await;

    let runs = log.lock().unwrap().clone();
    let mut order = Vec::new();
    for (id, _, _) in &runs {
        let id: ax_domain::ids::InstanceId = id.parse().unwrap();
        order.push(env.store.instance(&id).await.unwrap().unwrap().task_name);
    }
    assert_eq!(order, ["a", "b", "c"]);
    let b = env.store.instances(&ax_store::InstanceFilter { task: Some("b".into()), limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(b[0].params["upstream"]["task"], "a");
    assert_eq!(b[0].trigger_type, ax_domain::task::TriggerKind::Chain);

    // Redelivery of a's SUCCEEDED event fires b no second time.
    let a_instance = env.store.instances(&ax_store::InstanceFilter { task: Some("a".into()), limit: 1, ..Default::default() }).await.unwrap().remove(0);
    let event = ax_domain::event::InstanceTransitioned {
        task: "a".into(),
        task_version: 1,
        instance_id: a_instance.id.clone(),
        attempt: 1,
        seq: 4,
        from: Some(StateKind::Running),
        to: StateKind::Succeeded,
        operator: "test".into(),
        reason: String::new(),
        worker_id: None,
        trigger_type: ax_domain::task::TriggerKind::Event,
        trigger_id: "go".into(),
        trace_id: a_instance.trace_id.clone(),
        shard: None,
    };
    assert_eq!(ax_chain::fire_downstream(&env.store, &event).await.unwrap(), 0);
    assert_eq!(count_in_state(&env, "b", "SUCCEEDED").await, 1);

    // a after c would close a -> b -> c -> a.
    let definition = ax_domain::task::TaskDefinition::from_json(def("a", Some("c")).to_string().as_bytes()).unwrap();
    let err = env.store.register_task(&definition, "test").await.unwrap_err();
    match err {
        ax_store::StoreError::Refused { field, reason } => {
            assert_eq!(field, "triggers[0].after");
            assert!(reason.contains("c -> a -> b -> c"), "{reason}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
    assert_eq!(env.store.task("a").await.unwrap().unwrap().version, 1, "the refused update changed nothing");
    chain.stop().await;
    worker.stop().await;
    scheduler.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_enabled_again_catches_up_once_by_default() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    env.register(json!({
        "task_name": "sleepy", "owner": "tests",
        "triggers": [{"type": "cron", "cron": "* * * * * *", "misfire": "fire_once"}],
        "execution": {"handler": "noop"}
    }))
    .await;
    env.store.set_enabled("sleepy", false, "test").await.unwrap();
    let disabled_at = chrono::Utc::now();
    // Longer than the fires created ahead (cancelled by the disable, up to 3 s) and
    // the misfire grace (2 s): the schedule's next fire is then a missed one.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = 'sleepy'").fetch_one(env.store.pool()).await.unwrap();
    env.store.set_enabled("sleepy", true, "test").await.unwrap();
    let enabled_at = chrono::Utc::now();
    let catch_up: Vec<String> = eventually(Duration::from_secs(10), "the catch-up fire", || async {
        let ops: Vec<String> = sqlx::query_scalar("SELECT t.operator FROM instance_transitions t JOIN instances i ON i.id = t.instance_id WHERE i.task_name = 'sleepy' AND t.seq = 1 AND t.operator LIKE 'cron-misfire%'")
            .fetch_all(env.store.pool())
            .await
            .unwrap();
        (!ops.is_empty()).then_some(ops)
    })
    .await;
    assert_eq!(catch_up.len(), 1, "fire_once: one catch-up instance for ~5 missed fires");
    // Fires created ahead before the task was disabled were cancelled, not missed.
    let missed_fires: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM instances WHERE task_name = 'sleepy' AND due_at > ? AND due_at < ? AND trigger_id LIKE 'cron:%' AND state <> 'CANCELLED'",
    )
        .bind(disabled_at + chrono::TimeDelta::seconds(1))
        .bind(enabled_at - chrono::TimeDelta::seconds(1))
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert!(missed_fires <= 1, "the fires missed while disabled were not all created ({missed_fires}, {before} before)");
    scheduler.stop().await;
    env.cleanup().await;
}

/// A timer that wakes late hands the store a schedule's fire for second n and for
/// n + 1 in one batch: both fire, in order, and a repeat of n does not; nor does a
/// fire planned from a task version the schedule no longer has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_fires_a_schedule_twice_in_order_and_a_stale_fire_not_at_all() {
    use ax_store::schedules::CronFire;
    let env = TestEnv::new().await;
    let task = env
        .register(json!({"task_name": "twice", "owner": "tests", "triggers": [{"type": "cron", "cron": "* * * * * *"}], "execution": {"handler": "noop"}}))
        .await;
    let first = env.store.cron_schedules_of(&task.id).await.unwrap().remove(0).next_fire_at;
    let second = first + chrono::TimeDelta::seconds(1);
    let third = first + chrono::TimeDelta::seconds(2);
    let fire = |expected_next, new_next| CronFire {
        task_id: task.id.clone(),
        trigger_index: 0,
        task_version: task.version,
        expected_next,
        new_next,
        instances: vec![ax_store::NewInstance::for_cron_fire(&task.id, task.version, &task.definition, 0, expected_next, "test")],
    };
    let outcomes = env.store.fire_cron(&[fire(first, second), fire(second, third), fire(first, second)], None).await.unwrap();
    assert_eq!(outcomes.len(), 2, "seconds n and n + 1 fired; the repeat of n did not");
    assert_eq!(env.store.cron_schedules_of(&task.id).await.unwrap()[0].next_fire_at, third);
    let due: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT due_at FROM instances WHERE task_name = 'twice' ORDER BY due_at").fetch_all(env.store.pool()).await.unwrap();
    assert_eq!(due, [first, second]);

    // A planner that still holds version 1's row after version 2 rewrote the
    // schedule (the same expression keeps its next fire) does not take the fire.
    let updated = env
        .register(json!({"task_name": "twice", "owner": "tests", "description": "v2", "triggers": [{"type": "cron", "cron": "* * * * * *"}], "execution": {"handler": "noop"}}))
        .await;
    assert_eq!(env.store.cron_schedules_of(&task.id).await.unwrap()[0].next_fire_at, third, "an unrelated update keeps the next fire");
    let fourth = third + chrono::TimeDelta::seconds(1);
    let stale = env.store.fire_cron(&[fire(third, fourth)], None).await.unwrap();
    assert!(stale.is_empty(), "a fire planned from version 1 is refused: {stale:?}");
    let current = CronFire {
        task_version: updated.version,
        instances: vec![ax_store::NewInstance::for_cron_fire(&task.id, updated.version, &updated.definition, 0, third, "test")],
        ..fire(third, fourth)
    };
    assert_eq!(env.store.fire_cron(&[current], None).await.unwrap().len(), 1, "the same fire planned from version 2 is taken");
    env.cleanup().await;
}

/// Many first registrations of cron tasks at once (a deployment registering its
/// tasks in parallel) all succeed: none deadlocks into a `Busy` the caller must retry.
#[tokio::test]
async fn concurrent_first_registrations_of_cron_tasks_never_come_back_busy() {
    let env = TestEnv::new().await;
    let definitions: Vec<ax_domain::task::TaskDefinition> = (0..240)
        .map(|i| {
            let json = json!({
                "task_name": format!("burst-{i:03}"),
                "owner": "tests",
                "triggers": [{"type": "cron", "cron": format!("{} * * * * *", i % 60)}],
                "execution": {"handler": "noop"}
            });
            ax_domain::task::TaskDefinition::from_json(json.to_string().as_bytes()).unwrap()
        })
        .collect();
    let results: Vec<Result<ax_store::Registered, ax_store::StoreError>> = futures::stream::iter(&definitions)
        .map(|d| env.store.register_task(d, "tests"))
        .buffer_unordered(16)
        .collect()
        .await;
    let failed: Vec<String> = results.iter().filter_map(|r| r.as_ref().err().map(ToString::to_string)).collect();
    assert!(failed.is_empty(), "{} of 240 registrations failed, e.g. {:?}", failed.len(), failed.first());
    let schedules: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM cron_schedules").fetch_one(env.store.pool()).await.unwrap();
    assert_eq!(schedules, 240);
    env.cleanup().await;
}

/// A delayed trigger that comes in through intake is in the timer's due index at
/// once: intake tells the leader's timer in the process (its kick no longer goes
/// over NATS to itself), rather than the timer finding it at its periodic reindex
/// five seconds later (and the dispatcher's 200 ms poll starting it that late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_triggers_from_nats_are_indexed_for_the_timer_at_once() {
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    env.register(json!({"task_name": "soon", "owner": "tests", "execution": {"handler": "record"}})).await;
    let client = redis::Client::open(ax_tests::redis_url()).unwrap();
    let redis = client.get_multiplexed_async_connection().await.unwrap();
    let due_key = format!("{}:due", env.namespace);

    // The first is indexed by whatever comes first (the new term's reindex or the
    // kick); the second, right after it, can only be indexed in time by the kick.
    for trigger in ["first", "second"] {
        let body = json!({"trigger_id": trigger, "delay_sec": 60}).to_string();
        env.bus.jetstream.publish(env.names.trigger("soon"), body.into()).await.unwrap().await.unwrap();
        let timeout = if trigger == "first" { Duration::from_secs(15) } else { Duration::from_millis(2_500) };
        eventually(timeout, &format!("the {trigger} delayed instance in the due index"), || {
            let (env, redis, due_key) = (&env, redis.clone(), due_key.clone());
            async move {
                let id: Option<String> =
                    sqlx::query_scalar("SELECT id FROM instances WHERE trigger_id = ?").bind(trigger).fetch_optional(env.store.pool()).await.unwrap();
                let member = format!("i:{}", id?);
                let score: Option<f64> = redis::cmd("ZSCORE").arg(&due_key).arg(&member).query_async(&mut redis.clone()).await.unwrap();
                score.map(|_| ())
            }
        })
        .await;
    }
    scheduler.stop().await;
    env.cleanup().await;
}

/// A cron fire of a task without a concurrency limit is committed up to the
/// planner's window ahead of its time, due at that time. One of a task disabled by
/// its time is cancelled when due (one of a task enabled again by then is not);
/// changing the expression cancels the old schedule's at once, and
/// the new schedule starts after them (their trigger ids stay claimed). A task with
/// a limit has each fire created at its time: the limit is judged on what is active
/// then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_fires_created_ahead_are_cancelled_when_their_schedule_no_longer_wants_them() {
    type Utc = chrono::DateTime<chrono::Utc>;
    let env = TestEnv::new().await;
    let scheduler = env.start_scheduler(env.config(&[]));
    let per_second = |name: &str, cron: &str, limit: Option<u32>| {
        let mut definition = json!({"task_name": name, "owner": "tests", "triggers": [{"type": "cron", "cron": cron}], "execution": {"handler": "noop"}});
        if let Some(limit) = limit {
            definition["concurrency"] = json!({"max_running_instances": limit, "blocking_strategy": "serial"});
        }
        definition
    };
    // Urgent, so the dispatcher (no worker here) reads its fires before the backlog
    // of the others': a fire is judged when a pass reads it.
    let mut early = per_second("early", "* * * * * *", None);
    early["priority"] = json!("urgent");
    env.register(early).await;
    env.register(per_second("again", "* * * * * *", None)).await;
    env.register(per_second("moved", "* * * * * *", None)).await;
    env.register(per_second("limited", "* * * * * *", Some(1000))).await;
    let pool = env.store.pool();
    let due_after = |task: &'static str, at: Utc| async move {
        sqlx::query_as::<_, (String, Utc, String, String)>("SELECT id, due_at, state, reason FROM instances WHERE task_name = ? AND due_at > ? ORDER BY due_at")
            .bind(task)
            .bind(at)
            .fetch_all(pool)
            .await
            .unwrap()
    };
    eventually(Duration::from_secs(10), "fires created ahead", || async {
        let now = chrono::Utc::now();
        let ahead = [due_after("early", now).await.len(), due_after("again", now).await.len(), due_after("moved", now).await.len()];
        let early_fired: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = 'early' AND due_at < ?").bind(now).fetch_one(pool).await.unwrap();
        (ahead.iter().all(|&n| n >= 2) && early_fired > 0).then_some(())
    })
    .await;

    // Disabled: the fires created ahead are judged at their time, not before. One
    // task stays disabled, the other is enabled again at once.
    let before_disable = chrono::Utc::now();
    env.store.set_enabled("early", false, "test").await.unwrap();
    env.store.set_enabled("again", false, "test").await.unwrap();
    env.store.set_enabled("again", true, "test").await.unwrap();
    let disabled_at = chrono::Utc::now();
    let later = disabled_at + chrono::TimeDelta::milliseconds(500);
    let early_ahead = due_after("early", later).await;
    let again_ahead = due_after("again", later).await;
    assert!(!early_ahead.is_empty() && !again_ahead.is_empty(), "fires were created ahead of the disable");
    for (id, _, state, _) in early_ahead.iter().chain(&again_ahead) {
        assert_eq!(state, "CREATED", "fire {id} waits for its time to be judged");
    }
    // Fires that came due while the task was enabled wait for a worker as before.
    let due_while_enabled: Vec<String> = sqlx::query_scalar("SELECT id FROM instances WHERE task_name = 'early' AND due_at < ?")
        .bind(before_disable)
        .fetch_all(pool)
        .await
        .unwrap();
    assert!(!due_while_enabled.is_empty(), "the task fired before it was disabled");

    env.register(per_second("moved", "*/2 * * * * *", None)).await;
    let updated_at = chrono::Utc::now();
    // Told apart by version: the planner may create version 2's fires at once.
    let of_version = |version: u32| async move {
        sqlx::query_as::<_, (String, Utc, String, String)>("SELECT id, due_at, state, reason FROM instances WHERE task_name = 'moved' AND task_version = ? ORDER BY due_at")
            .bind(version)
            .fetch_all(pool)
            .await
            .unwrap()
    };
    let old = of_version(1).await;
    let replaced: Vec<&(String, Utc, String, String)> = old.iter().filter(|f| f.1 > updated_at).collect();
    assert!(!replaced.is_empty(), "fires were created ahead of the update");
    for (id, _, state, reason) in &replaced {
        assert_eq!(state, "CANCELLED", "fire {id} of the old schedule no longer runs");
        assert!(reason.starts_with("cron trigger changed"), "{reason}");
    }
    let last_old = old.last().expect("version 1 fired").1;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let new_fires = of_version(2).await;
    assert!(new_fires.len() >= 2, "the new schedule fires: {new_fires:?}");
    let first_new = last_old.timestamp() + 1 + (last_old.timestamp() + 1) % 2;
    assert_eq!(new_fires[0].1.timestamp(), first_new, "the new schedule begins with its first fire after the old one's last");
    for (id, due, state, _) in &new_fires {
        assert_eq!(state, "CREATED", "fire {id} of the new schedule waits for a worker");
        assert_eq!(due.timestamp() % 2, 0, "fire {id} at {due} is on the new schedule");
    }

    let limited: Vec<(Utc, Utc)> = sqlx::query_as("SELECT due_at, created_at FROM instances WHERE task_name = 'limited'").fetch_all(pool).await.unwrap();
    assert!(limited.len() >= 3, "the limited task fired: {limited:?}");
    for (due, created) in &limited {
        assert!(created >= due, "a limited task's fire at {due} is created at its time, not ahead ({created})");
    }
    // By now every fire created ahead is past its time (the planner's window is 3 s).
    let state_of = |id: String| async move {
        sqlx::query_as::<_, (String, String)>("SELECT state, reason FROM instances WHERE id = ?").bind(id).fetch_one(pool).await.unwrap()
    };
    for (id, due, _, _) in &early_ahead {
        let (state, reason) = state_of(id.clone()).await;
        assert_eq!((state.as_str(), reason.as_str()), ("CANCELLED", "task disabled"), "fire {id} at {due} of a task disabled before it");
    }
    for (id, due, _, _) in &again_ahead {
        assert_eq!(state_of(id.clone()).await.0, "CREATED", "fire {id} at {due} of a task enabled again before it waits for a worker");
    }
    for id in due_while_enabled {
        assert_eq!(state_of(id.clone()).await.0, "CREATED", "fire {id}, due while its task was enabled, waits for a worker");
    }
    let again_later: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = 'again' AND due_at > ?").bind(later).fetch_one(pool).await.unwrap();
    assert!(again_later as usize > again_ahead.len(), "the task enabled again goes on firing");
    let early_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = 'early' AND due_at > ?").bind(later).fetch_one(pool).await.unwrap();
    assert_eq!(early_after as usize, early_ahead.len(), "a disabled task creates no more fires");
    scheduler.stop().await;
    env.cleanup().await;
}
