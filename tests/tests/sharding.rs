//! Sharded and broadcast firings: one firing fans out into shard instances, each on
//! its own worker while enough exist; a failed shard retries on its own; the firing
//! settles when its last shard ends; cancelling the firing cancels every shard.
//! Each test prints what it measured.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ax_domain::ids::InstanceId;
use ax_domain::state::StateKind;
use ax_domain::task::TriggerKind;
use ax_domain::trigger::TriggerRequest;
use ax_store::{InstanceRecord, NewInstance};
use ax_tests::{count_in_state, eventually, AxProcess, Service, TestEnv};
use futures::StreamExt;
use serde_json::json;

const FAST: [&str; 4] = ["--lease", "6s", "--heartbeat-interval", "1s"];

async fn fire(env: &TestEnv, task: &str, trigger_id: &str) -> InstanceId {
    let record = env.store.task(task).await.unwrap().unwrap();
    let new = NewInstance::from_trigger(&record, &TriggerRequest::default(), trigger_id.into(), TriggerKind::Event, "test", ax_domain::now());
    let id = env.store.create_instances(&[new]).await.unwrap().remove(0).instance_id().clone();
    env.bus.client.publish(env.names.dispatch_kick(), bytes::Bytes::new()).await.unwrap();
    id
}

async fn finished(env: &TestEnv, id: &InstanceId, within: Duration) -> InstanceRecord {
    eventually(within, &format!("firing {id} to finish"), || async {
        let i = env.store.instance(id).await.unwrap().unwrap();
        i.state.kind().is_final().then_some(i)
    })
    .await
}

/// Waits until every named worker has sent a heartbeat (the scheduler hears the same ones).
async fn workers_heard(env: &TestEnv, ids: &[&str]) {
    let mut heartbeats = env.bus.client.subscribe(env.names.heartbeat()).await.unwrap();
    let mut seen = BTreeSet::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while seen.len() < ids.len() {
            let message = heartbeats.next().await.expect("heartbeats flow");
            let beat: ax_domain::protocol::Heartbeat = serde_json::from_slice(&message.payload).unwrap();
            if ids.contains(&beat.worker_id.as_str()) {
                seen.insert(beat.worker_id.as_str().to_owned());
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("heard only {seen:?} of {ids:?}"));
}

async fn to_states(env: &TestEnv, id: &InstanceId) -> Vec<String> {
    env.store.transitions(id).await.unwrap().into_iter().map(|t| t.to_state).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_firing_runs_one_shard_on_every_worker_and_chains_once() {
    let env = TestEnv::new().await;
    let out = std::env::temp_dir().join(format!("{}-broadcast", env.namespace));
    let _scheduler = AxProcess::spawn(&env, &["scheduler", FAST[0], FAST[1], FAST[2], FAST[3]], &[]);
    let _workers: Vec<AxProcess> = ["w1", "w2", "w3"]
        .iter()
        .map(|w| AxProcess::spawn(&env, &["worker", "--worker-id", w, FAST[0], FAST[1], FAST[2], FAST[3]], &[]))
        .collect();
    let _chain = Service::spawn({
        let (store, bus) = (env.store.clone(), env.bus.clone());
        move |token| ax_chain::run(store, bus, token)
    });
    env.register(json!({
        "task_name": "everywhere", "owner": "tests",
        "dispatch": {"strategy": "broadcast"},
        "execution": {"handler": "shell", "timeout": 30,
            "config": {"command": format!("echo \"$AX_SHARD_INDEX $AX_SHARD_TOTAL $AX_FIRING_ID\" >> {}", out.display())}}
    }))
    .await;
    env.register(json!({
        "task_name": "after_everywhere", "owner": "tests",
        "triggers": [{"type": "chain", "after": "everywhere"}],
        "execution": {"handler": "noop"}
    }))
    .await;
    workers_heard(&env, &["w1", "w2", "w3"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let firing = fire(&env, "everywhere", "once").await;
    let done = finished(&env, &firing, Duration::from_secs(30)).await;
    println!("broadcast over 3 workers: firing to SUCCEEDED in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(done.state.kind(), StateKind::Succeeded, "{}", done.reason);
    assert_eq!(done.reason, "3 of 3 shards succeeded, 0 failed, 0 cancelled");
    assert_eq!(to_states(&env, &firing).await, ["CREATED", "SHARDED", "SUCCEEDED"]);

    let shards = env.store.shards_of(&firing).await.unwrap();
    let indices: Vec<u32> = shards.iter().map(|s| s.shard.as_ref().unwrap().index).collect();
    assert_eq!(indices, [0, 1, 2]);
    assert!(shards.iter().all(|s| s.state.kind() == StateKind::Succeeded && s.attempt == 1));
    let workers: BTreeSet<&str> = shards.iter().map(|s| s.last_worker_id.as_ref().unwrap().as_str()).collect();
    assert_eq!(workers, BTreeSet::from(["w1", "w2", "w3"]), "one shard on every worker");

    let mut lines: Vec<String> = std::fs::read_to_string(&out).unwrap().lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, (0..3).map(|i| format!("{i} 3 {firing}")).collect::<Vec<_>>(), "the shell saw AX_SHARD_INDEX/TOTAL and AX_FIRING_ID");

    // The chain follows the firing, not each shard.
    eventually(Duration::from_secs(20), "the downstream task to succeed", || async {
        (count_in_state(&env, "after_everywhere", "SUCCEEDED").await == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let downstream: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_name = 'after_everywhere'")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(downstream, 1, "one downstream instance per firing");

    // The api shows the firing with its shards.
    let (status, view) = env.call("GET", &format!("/api/v1/instances/{firing}"), None).await;
    assert!(status.is_success(), "{view}");
    assert_eq!(view["shards"]["total"], 3);
    assert_eq!(view["shard_instances"].as_array().unwrap().len(), 3);
    let _ = std::fs::remove_file(out);
    env.cleanup().await;
}

/// (worker, shard index, attempt) of every run.
type Runs = Arc<Mutex<Vec<(String, u32, u32)>>>;

/// A handler that records its run and fails shard `failing` on attempt 1.
fn shard_handler(worker: &'static str, runs: Runs, failing: Option<u32>) -> Arc<dyn ax_worker::Handler> {
    ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
        let runs = runs.clone();
        async move {
            let shard = ctx.shard.clone().ok_or_else(|| ax_worker::TaskError::abort("not a shard"))?;
            runs.lock().unwrap().push((worker.to_owned(), shard.index, ctx.attempt));
            tokio::time::sleep(Duration::from_millis(200)).await;
            if Some(shard.index) == failing && ctx.attempt == 1 {
                return Err(ax_worker::TaskError::retry(format!("shard {} of {} failed once", shard.index, shard.total)));
            }
            Ok(Some(json!({ "shard": shard.index })))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shard_retries_on_its_own_and_the_firing_succeeds() {
    let env = TestEnv::new().await;
    let _scheduler = env.start_scheduler(env.config(&FAST));
    let runs: Runs = Arc::default();
    let _workers: Vec<Service> = ["w1", "w2"]
        .into_iter()
        .map(|w| {
            let config = env.config(&["--worker-id", w, "--max-running", "4", FAST[0], FAST[1], FAST[2], FAST[3]]);
            env.start_worker(config, vec![("split", shard_handler(w, runs.clone(), Some(2)))])
        })
        .collect();
    // One running firing at a time: the shards share the firing's slot, so they
    // must not exclude each other through the per-task guard.
    env.register(json!({
        "task_name": "split_job", "owner": "tests",
        "dispatch": {"sharding": {"total": 4}},
        "concurrency": {"max_running_instances": 1},
        "execution": {"handler": "split", "timeout": 30, "retry": {"max_attempts": 3, "backoff": "fixed", "initial_interval_sec": 1}}
    }))
    .await;
    workers_heard(&env, &["w1", "w2"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let firing = fire(&env, "split_job", "once").await;
    let done = finished(&env, &firing, Duration::from_secs(30)).await;
    println!("4 shards on 2 workers, shard 2 retried once: firing SUCCEEDED in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(done.state.kind(), StateKind::Succeeded, "{}", done.reason);

    let runs = runs.lock().unwrap().clone();
    let mut attempts: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (_, index, attempt) in &runs {
        attempts.entry(*index).or_default().push(*attempt);
    }
    assert_eq!(attempts, BTreeMap::from([(0, vec![1]), (1, vec![1]), (2, vec![1, 2]), (3, vec![1])]), "only shard 2 ran again");
    let mut per_worker: BTreeMap<&str, u32> = BTreeMap::new();
    for (worker, _, attempt) in &runs {
        if *attempt == 1 {
            *per_worker.entry(worker.as_str()).or_default() += 1;
        }
    }
    assert_eq!(per_worker, BTreeMap::from([("w1", 2), ("w2", 2)]), "4 shards spread over 2 workers");

    let shards = env.store.shards_of(&firing).await.unwrap();
    let retried = &shards[2];
    assert_eq!((retried.state.kind(), retried.attempt), (StateKind::Succeeded, 2));
    assert_eq!(to_states(&env, &retried.id).await, ["CREATED", "DISPATCHED", "RUNNING", "RETRYING", "CREATED", "DISPATCHED", "RUNNING", "SUCCEEDED"]);
    assert_eq!(retried.result, Some(json!({ "shard": 2 })));
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_out_of_attempts_fails_the_firing_and_a_cancelled_firing_cancels_its_shards() {
    let env = TestEnv::new().await;
    let _scheduler = env.start_scheduler(env.config(&FAST));
    let stopped = Arc::new(AtomicU32::new(0));
    let handler = {
        let stopped = stopped.clone();
        ax_worker::handler_fn(move |ctx: ax_worker::TaskContext| {
            let stopped = stopped.clone();
            async move {
                let shard = ctx.shard.clone().ok_or_else(|| ax_worker::TaskError::abort("not a shard"))?;
                match ctx.task.as_str() {
                    "fragile" if shard.index == 1 => Err(ax_worker::TaskError::retry("shard 1 always fails")),
                    "fragile" => Ok(None),
                    _ => {
                        ctx.cancellation.cancelled().await;
                        stopped.fetch_add(1, Ordering::SeqCst);
                        Err(ax_worker::TaskError::retry("stopped"))
                    }
                }
            }
        })
    };
    let _workers: Vec<Service> = ["w1", "w2", "w3"]
        .into_iter()
        .map(|w| env.start_worker(env.config(&["--worker-id", w, FAST[0], FAST[1], FAST[2], FAST[3]]), vec![("shards", handler.clone())]))
        .collect();
    for (name, total) in [("fragile", 2), ("endless", 3)] {
        env.register(json!({
            "task_name": name, "owner": "tests",
            "dispatch": {"sharding": {"total": total}},
            "execution": {"handler": "shards", "timeout": 60, "retry": {"max_attempts": 2, "backoff": "fixed", "initial_interval_sec": 1}}
        }))
        .await;
    }
    workers_heard(&env, &["w1", "w2", "w3"]).await;

    let fragile = fire(&env, "fragile", "once").await;
    let done = finished(&env, &fragile, Duration::from_secs(30)).await;
    assert_eq!(done.state.kind(), StateKind::Failed);
    assert_eq!(done.reason, "1 of 2 shards succeeded, 1 failed, 0 cancelled");
    let shards = env.store.shards_of(&fragile).await.unwrap();
    assert_eq!((shards[1].state.kind(), shards[1].attempt), (StateKind::Failed, 2), "the failing shard used both attempts");
    assert_eq!(shards[0].state.kind(), StateKind::Succeeded);

    let endless = fire(&env, "endless", "once").await;
    eventually(Duration::from_secs(20), "all 3 shards running", || async {
        let shards = env.store.shards_of(&endless).await.unwrap();
        (shards.len() == 3 && shards.iter().all(|s| s.state.kind() == StateKind::Running)).then_some(())
    })
    .await;
    let cancelled_at = Instant::now();
    let (status, view) = env.call("POST", &format!("/api/v1/instances/{endless}/cancel"), None).await;
    assert!(status.is_success(), "{view}");
    assert_eq!(view["state"], "CANCELLED");
    let shards = env.store.shards_of(&endless).await.unwrap();
    assert!(shards.iter().all(|s| s.state.kind() == StateKind::Cancelled), "every shard cancelled with the firing");
    assert!(shards[0].reason.starts_with(&format!("firing {endless} cancelled")), "{}", shards[0].reason);
    eventually(Duration::from_secs(10), "every running shard's handler to stop", || async {
        (stopped.load(Ordering::SeqCst) == 3).then_some(())
    })
    .await;
    println!("cancelled firing: its 3 running shards stopped within {:.0} ms", cancelled_at.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(to_states(&env, &endless).await, ["CREATED", "SHARDED", "CANCELLED"]);
    env.cleanup().await;
}
