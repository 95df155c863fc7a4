//! Scenario 5b, leader failover: two `ax scheduler` processes, a task that fires every
//! second; the leader (read from `scheduler_leader.holder`, `host:pid`) is
//! `kill -9`ed and the time to the first fire committed by the new leader is taken
//! from MySQL (`created_at` of the first instance after the kill: the dead leader
//! can commit nothing after it).

use std::time::{Duration, Instant};

use ax_domain::Timestamp;
use serde_json::json;

use crate::env::BenchEnv;
use crate::report::{Figure, Report, Target, Unit};
use crate::scenarios::Ctx;

const S: &str = "5 recovery";

/// # Errors
/// A service failed under the harness.
pub async fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let env = BenchEnv::new("fail", &ctx.servers, &ctx.log_dir, 4).await?;
    let result = measure(ctx, &env, report).await;
    env.cleanup().await;
    result
}

async fn measure(ctx: &Ctx, env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let pool = env.store.pool();
    let task = env
        .register(json!({
            "task_name": "tick",
            "owner": "ax-bench",
            "triggers": [{"type": "cron", "cron": "* * * * * *"}],
            "execution": {"handler": "noop", "timeout": 60}
        }))
        .await?;
    let mut schedulers = vec![env.spawn("scheduler-a", &ctx.ax, &["scheduler"])?, env.spawn("scheduler-b", &ctx.ax, &["scheduler"])?];
    let (epoch, holder) = env.wait_for_leader(Duration::from_secs(30)).await?;

    // A few fires under the first leader.
    let waiting = Instant::now();
    loop {
        let fires: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_id = ?").bind(task.id.as_str()).fetch_one(pool).await?;
        if fires >= 3 {
            break;
        }
        anyhow::ensure!(waiting.elapsed() < Duration::from_secs(30), "the per-second cron did not fire 3 times within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid: u32 = holder.rsplit(':').next().and_then(|p| p.parse().ok()).ok_or_else(|| anyhow::anyhow!("leader holder {holder:?} has no pid"))?;
    let index = schedulers.iter().position(|s| s.pid == pid).ok_or_else(|| anyhow::anyhow!("the leader (pid {pid}) is not one of ours"))?;
    let mut leader = schedulers.remove(index);
    let killed_at = leader.kill9().await;

    let mut first_new: Option<Timestamp> = None;
    let waiting = Instant::now();
    while waiting.elapsed() < Duration::from_secs(60) {
        first_new = sqlx::query_scalar("SELECT MIN(created_at) FROM instances WHERE task_id = ? AND created_at > ?")
            .bind(task.id.as_str())
            .bind(killed_at)
            .fetch_one(pool)
            .await?;
        if first_new.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (new_epoch, new_holder) = env.store.leadership().await?;
    let acquired_at: Timestamp = sqlx::query_scalar("SELECT acquired_at FROM scheduler_leader WHERE id = 1").fetch_one(pool).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (total, distinct): (i64, i64) = sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT due_at) FROM instances WHERE task_id = ?")
        .bind(task.id.as_str())
        .fetch_one(pool)
        .await?;
    let last_old: Option<Timestamp> = sqlx::query_scalar("SELECT MAX(due_at) FROM instances WHERE task_id = ? AND created_at < ?")
        .bind(task.id.as_str())
        .bind(killed_at)
        .fetch_one(pool)
        .await?;
    let first_new_due: Option<Timestamp> = sqlx::query_scalar("SELECT MIN(due_at) FROM instances WHERE task_id = ? AND created_at > ?")
        .bind(task.id.as_str())
        .bind(killed_at)
        .fetch_one(pool)
        .await?;
    let first_new_operator: Option<String> = sqlx::query_scalar(
        "SELECT t.operator FROM instance_transitions t JOIN instances i ON i.id = t.instance_id \
         WHERE i.task_id = ? AND t.seq = 1 AND i.created_at > ? ORDER BY i.created_at LIMIT 1",
    )
    .bind(task.id.as_str())
    .bind(killed_at)
    .fetch_optional(pool)
    .await?;
    for scheduler in schedulers {
        scheduler.stop(Duration::from_secs(10)).await;
    }

    let failover = first_new.map(|t| (t - killed_at).as_seconds_f64());
    report.push(
        Figure::new(S, "leader kill → first fire by the new leader", failover, Unit::Seconds)
            .target(Target::AtMost(5.0))
            .note(format!("per-second cron, 2 `ax scheduler` processes; new term {new_epoch} (was {epoch})")),
    );
    report.push(
        Figure::new(S, "leader kill → new term begins", Some((acquired_at - killed_at).as_seconds_f64() * 1000.0), Unit::Ms)
            .note("the standby waits in GET_LOCK; MySQL frees the lock when the killed connection closes"),
    );
    let late = first_new.zip(first_new_due).map(|(created, due)| (created - due).as_seconds_f64() * 1000.0);
    report.push(
        Figure::new(S, "first fire by the new leader: created − due", late, Unit::Ms)
            .note("the rest of the failover time is the wait for the next second the cron names"),
    );
    report.push(
        Figure::new(S, "leader kill: fires duplicated", Some((total - distinct) as f64), Unit::Count)
            .target(Target::AtMost(0.0)),
    );
    report.detail(
        "failover",
        json!({
            "killed_pid": pid,
            "killed_at": killed_at,
            "old_term": epoch,
            "new_term": new_epoch,
            "new_holder": new_holder,
            "term_acquired_at": acquired_at,
            "first_fire_after_kill": first_new,
            "first_fire_operator": first_new_operator,
            "last_fire_due_before_kill": last_old,
            "first_fire_due_after_kill": first_new_due,
            "fires": total,
        }),
    );
    Ok(())
}
