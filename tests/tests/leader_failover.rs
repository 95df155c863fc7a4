//! Leadership (seed 2.2) through real `ax scheduler` processes: a killed leader is
//! replaced within 5 s with no cron fire lost or doubled, and a frozen leader that
//! wakes up after its term cannot dispatch or fire anything.

use std::time::{Duration, Instant};

use ax_tests::{eventually, AxProcess, TestEnv};
use serde_json::json;

async fn leadership(env: &TestEnv) -> (u64, String, chrono::DateTime<chrono::Utc>) {
    sqlx::query_as("SELECT epoch, holder, acquired_at FROM scheduler_leader WHERE id = 1").fetch_one(env.store.pool()).await.unwrap()
}

fn pid_of(holder: &str) -> u32 {
    holder.rsplit(':').next().and_then(|p| p.parse().ok()).expect("holder is host:pid")
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

async fn register_ticker(env: &TestEnv) {
    env.register(json!({
        "task_name": "ticker", "owner": "tests",
        "triggers": [{"type": "cron", "cron": "* * * * * *", "misfire": "fire_all", "misfire_limit": 60}],
        "execution": {"handler": "noop"}
    }))
    .await;
}

/// Fire times of the ticker, in order, and whether any repeats.
async fn fires(env: &TestEnv) -> Vec<i64> {
    let seconds: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT due_at FROM instances WHERE task_name = 'ticker' ORDER BY due_at").fetch_all(env.store.pool()).await.unwrap();
    seconds.iter().map(|t| t.timestamp()).collect()
}

fn assert_contiguous(fires: &[i64]) {
    assert!(fires.len() > 5, "the cron fired: {fires:?}");
    for pair in fires.windows(2) {
        assert_ne!(pair[0], pair[1], "a fire happened twice: {fires:?}");
        assert_eq!(pair[1] - pair[0], 1, "a fire was lost between {} and {}: {fires:?}", pair[0], pair[1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_five_seconds_and_no_fire_is_lost() {
    let env = TestEnv::new().await;
    let mut schedulers = vec![AxProcess::spawn(&env, &["scheduler"], &[]), AxProcess::spawn(&env, &["scheduler"], &[])];
    register_ticker(&env).await;
    let (epoch, holder, _) = eventually(Duration::from_secs(20), "a leader", || async {
        let l = leadership(&env).await;
        (l.0 > 0).then_some(l)
    })
    .await;
    eventually(Duration::from_secs(20), "a few fires", || async { (fires(&env).await.len() >= 3).then_some(()) }).await;

    let leader_pid = pid_of(&holder);
    let killed = Instant::now();
    let killed_at = chrono::Utc::now();
    let leader = schedulers.iter_mut().find(|p| p.child.id() == Some(leader_pid)).expect("the leader is one of ours");
    leader.kill().await;
    let (new_epoch, _, acquired_at) = eventually(Duration::from_secs(15), "a new leader", || async {
        let l = leadership(&env).await;
        (l.0 > epoch).then_some(l)
    })
    .await;
    let failover = (acquired_at - killed_at).as_seconds_f64();
    println!("leader kill -9 -> new term {new_epoch} after {failover:.2} s (noticed by the test after {:.2} s)", killed.elapsed().as_secs_f64());
    assert!(failover <= 5.0, "failover took {failover:.2} s");

    tokio::time::sleep(Duration::from_secs(4)).await;
    env.store.set_enabled("ticker", false, "test").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_contiguous(&fires(&env).await);
    drop(schedulers);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_that_wakes_up_after_its_term_writes_nothing() {
    let env = TestEnv::new().await;
    let schedulers = vec![AxProcess::spawn(&env, &["scheduler"], &[]), AxProcess::spawn(&env, &["scheduler"], &[])];
    let _worker = AxProcess::spawn(&env, &["worker"], &[]);
    register_ticker(&env).await;
    let (old_epoch, holder, _) = eventually(Duration::from_secs(20), "a leader", || async {
        let l = leadership(&env).await;
        (l.0 > 0).then_some(l)
    })
    .await;
    eventually(Duration::from_secs(20), "a few fires", || async { (fires(&env).await.len() >= 3).then_some(()) }).await;

    let frozen = pid_of(&holder);
    signal(frozen, "STOP");
    let stopped_at = chrono::Utc::now();
    let (new_epoch, _, new_term_at) = eventually(Duration::from_secs(20), "a new leader while the old one is frozen", || async {
        let l = leadership(&env).await;
        (l.0 > old_epoch).then_some(l)
    })
    .await;
    println!("frozen leader replaced after {:.2} s (term {old_epoch} -> {new_epoch})", (new_term_at - stopped_at).as_seconds_f64());
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal(frozen, "CONT");
    // The old leader is awake with its plans and its stale term; give it time to try.
    tokio::time::sleep(Duration::from_secs(4)).await;
    env.store.set_enabled("ticker", false, "test").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let stale: Vec<(String, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "SELECT instance_id, operator, created_at FROM instance_transitions WHERE operator LIKE ? AND created_at > ?",
    )
    .bind(format!("%@{old_epoch}"))
    .bind(new_term_at)
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert!(stale.is_empty(), "the ex-leader wrote after its term ended: {stale:?}");
    let new_term_writes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instance_transitions WHERE operator LIKE ?")
        .bind(format!("%@{new_epoch}"))
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert!(new_term_writes > 0, "the new leader fired and dispatched");
    assert_contiguous(&fires(&env).await);
    drop(schedulers);
    env.cleanup().await;
}
