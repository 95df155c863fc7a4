//! Scenario 6, the ceilings of this machine, measured in the same run: what MySQL
//! allows for guarded transitions and what JetStream allows for publishes, with
//! nothing of AX but its store code in between (in-process, no `ax` process).
//!
//! - Single commits: 32 tasks on 32 connections each move their own instances
//!   CREATED → DISPATCHED → RUNNING → SUCCEEDED with `Store::transition` and one
//!   request per call: the same SQL AX runs (lock, guarded UPDATE, audit row,
//!   outbox row), one commit per transition.
//! - Batched: the same with 64 instances per call, one commit per 64 transitions.
//! - JetStream: pipelined publishes with the relay's headers to a file stream.
//!
//! AX's end-to-end transitions per second divided by the single-commit ceiling is
//! its ratio to the storage ceiling: above 1 means it batches past what one commit
//! per transition allows.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_domain::ids::{InstanceId, WorkerId};
use ax_domain::state::{Command, StateKind};
use ax_domain::task::{Priority, TriggerKind};
use ax_store::{CreateOutcome, NewInstance, Store, TaskRecord, TransitionRequest};
use serde_json::json;

use crate::db::Counters;
use crate::env::{event_task, BenchEnv};
use crate::report::{Figure, Report, Unit};
use crate::scenarios::{with_backing_services, Ctx};
use crate::procs::CpuMeter;
use crate::stats::rate;

const S: &str = "6 ceilings";
const CONNECTIONS: usize = 32;
const BATCH: usize = 64;

/// What AX achieved in the throughput scenario, to compare with the ceilings.
#[derive(Debug, Clone, Copy)]
pub struct AxFigures {
    pub instances_per_sec: f64,
    pub transitions_per_instance: f64,
}

/// # Errors
/// A service failed under the harness.
pub async fn run(ctx: &Ctx, ax: Option<AxFigures>, report: &mut Report) -> anyhow::Result<()> {
    let env = BenchEnv::new("ceil", &ctx.servers, &ctx.log_dir, CONNECTIONS as u32).await?;
    let result = measure(ctx, &env, ax, report).await;
    env.cleanup().await;
    result
}

async fn measure(ctx: &Ctx, env: &BenchEnv, ax: Option<AxFigures>, report: &mut Report) -> anyhow::Result<()> {
    let seconds = if ctx.quick { 3.0 } else { 6.0 };
    let task = env.register(event_task("ceil", "noop")).await?;
    let single_pool = create(&env.store, &task, "s", if ctx.quick { 12_000 } else { 25_000 }).await?;
    let batched_pool = create(&env.store, &task, "b", if ctx.quick { 30_000 } else { 80_000 }).await?;

    let processes = with_backing_services(Vec::new());
    let before = Counters::read(env.store.pool()).await;
    let cpu = CpuMeter::start(&processes);
    let single = drive(&env.store, single_pool, 1, seconds).await?;
    let single_cpu = cpu.finish();
    let single_counters = Counters::read(env.store.pool()).await.since(&before);
    let before = Counters::read(env.store.pool()).await;
    let cpu = CpuMeter::start(&processes);
    let batched = drive(&env.store, batched_pool, BATCH, seconds).await?;
    let batched_cpu = cpu.finish();
    let batched_counters = Counters::read(env.store.pool()).await.since(&before);
    let publishes = jetstream(env, if ctx.quick { 30_000 } else { 100_000 }).await?;

    let single_rate = rate(single.commits, single.seconds);
    let batched_rate = rate(batched.transitions, batched.seconds);
    report.push(
        Figure::new(S, "MySQL guarded-transition commits, 1 per commit", single_rate, Unit::PerSec)
            .note(format!("Store::transition, {CONNECTIONS} connections, {} transitions in {:.1}s; issue's reference ≈ 7,400/s", single.transitions, single.seconds)),
    );
    report.push(
        Figure::new(S, format!("MySQL guarded transitions, {BATCH} per commit"), batched_rate, Unit::PerSec)
            .note(format!("{} commits/s", rate(batched.commits, batched.seconds).map_or("n/a".into(), |r| format!("{r:.0}")))),
    );
    report.push(
        Figure::new(S, "JetStream pipelined publishes", rate(publishes.0, publishes.1), Unit::PerSec)
            .note("relay-style headers with Nats-Msg-Id, ~300-byte bodies, file stream; issue's reference > 100,000/s"),
    );
    if let (Some(ax), Some(ceiling)) = (ax, single_rate) {
        let ax_transitions = ax.instances_per_sec * ax.transitions_per_instance;
        report.push(
            Figure::new(S, "AX transitions/s ÷ single-commit ceiling", Some(ax_transitions / ceiling), Unit::Ratio).note(format!(
                "{:.0} instances/s × {:.2} transitions ÷ {ceiling:.0} commits/s; > 1 means AX batches past one commit per transition",
                ax.instances_per_sec, ax.transitions_per_instance
            )),
        );
        if let Some(batched) = batched_rate {
            report.push(Figure::new(S, format!("AX transitions/s ÷ {BATCH}-per-commit ceiling"), Some(ax_transitions / batched), Unit::Ratio));
        }
    }
    report.detail(
        "ceilings",
        json!({
            "single": single,
            "batched": batched,
            "single_mysql_counters": single_counters,
            "single_cpu": single_cpu,
            "batched_mysql_counters": batched_counters,
            "batched_cpu": batched_cpu,
            "jetstream_messages": publishes.0,
            "jetstream_seconds": publishes.1,
        }),
    );
    Ok(())
}

/// `count` CREATED instances, 1,000 per transaction.
async fn create(store: &Store, task: &TaskRecord, prefix: &str, count: usize) -> anyhow::Result<Vec<InstanceId>> {
    let now = ax_domain::now();
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<NewInstance> = chunk
            .iter()
            .map(|i| NewInstance {
                task_id: task.id.clone(),
                task_name: task.name.clone(),
                task_version: task.version,
                trigger_type: TriggerKind::Event,
                trigger_id: format!("{prefix}-{i}"),
                params: json!({}),
                payload_version: None,
                priority: Priority::Normal,
                due_at: now,
                initial: StateKind::Created,
                reason: String::new(),
                operator: "ax-bench".into(),
                concurrency: None,
                shard: None,
            })
            .collect();
        for outcome in store.create_instances(&batch).await? {
            if let CreateOutcome::Created(id) = outcome {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Driven {
    transitions: u64,
    commits: u64,
    seconds: f64,
    batch: usize,
}

/// Moves instances through DISPATCHED, RUNNING and SUCCEEDED, `batch` per
/// `Store::transition` call, from 32 tasks, until `seconds` pass or the pool of
/// instances runs out.
async fn drive(store: &Store, pool: Vec<InstanceId>, batch: usize, seconds: f64) -> anyhow::Result<Driven> {
    let pool = Arc::new(pool);
    let next = Arc::new(AtomicUsize::new(0));
    let transitions = Arc::new(AtomicU64::new(0));
    let commits = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let began = Instant::now();
    let mut drivers = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (store, pool, next, transitions, commits) = (store.clone(), pool.clone(), next.clone(), transitions.clone(), commits.clone());
        drivers.spawn(async move {
            let worker_id = WorkerId::generate();
            while Instant::now() < deadline {
                let from = next.fetch_add(batch, Ordering::Relaxed);
                if from >= pool.len() {
                    break;
                }
                let ids = &pool[from..(from + batch).min(pool.len())];
                let lease = ax_domain::now() + chrono::TimeDelta::seconds(30);
                let steps = [
                    Command::Dispatch { worker_id: worker_id.clone(), lease_expires_at: lease },
                    Command::Start { attempt: 1, worker_id: worker_id.clone(), lease_expires_at: lease, deadline_at: lease },
                    Command::Succeed { attempt: 1, worker_id: worker_id.clone() },
                ];
                for command in steps {
                    let requests: Vec<TransitionRequest> = ids
                        .iter()
                        .map(|id| TransitionRequest { instance_id: id.clone(), command: command.clone(), operator: "ax-bench".into(), result: None })
                        .collect();
                    let outcomes = store.transition(&requests).await?;
                    let applied = outcomes.iter().filter(|o| o.is_ok()).count();
                    anyhow::ensure!(applied == requests.len(), "a ceiling transition was refused: {:?}", outcomes.iter().find(|o| o.is_err()));
                    transitions.fetch_add(applied as u64, Ordering::Relaxed);
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = drivers.join_next().await {
        done??;
    }
    Ok(Driven {
        transitions: transitions.load(Ordering::Relaxed),
        commits: commits.load(Ordering::Relaxed),
        seconds: began.elapsed().as_secs_f64(),
        batch,
    })
}

/// Publishes `count` event-sized messages pipelined to a file stream of its own;
/// returns (messages, seconds until the last ack).
async fn jetstream(env: &BenchEnv, count: u64) -> anyhow::Result<(u64, f64)> {
    use async_nats::jetstream::stream;
    let name = format!("AXB_PUB_{}", env.namespace.to_ascii_uppercase());
    let subject = format!("{}.benchpub", env.namespace);
    let js = &env.bus.jetstream;
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![format!("{subject}.>")],
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await?;
    let body = bytes::Bytes::from(vec![0xa5u8; 300]);
    let began = Instant::now();
    let mut acks = crate::triggers::Acks::default();
    for i in 0..count {
        let id = ax_domain::ids::EventId::generate();
        let headers = ax_bus::headers::event_headers(id.as_str(), "ceil", Some("ins_bench"), Some("SUCCEEDED"));
        acks.push(js.publish_with_headers(format!("{subject}.{}", i % 16), headers, body.clone()).await?).await?;
    }
    acks.finish().await?;
    let seconds = began.elapsed().as_secs_f64();
    let _ = js.delete_stream(&name).await;
    Ok((count, seconds))
}
