//! The stage scenarios 1–3 share: one sandbox, one `ax scheduler` process and two
//! `ax worker --max-running 8 --prefetch 8` processes (the built-in no-op handler), warmed up.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context as _;
use ax_domain::protocol::Heartbeat;
use ax_store::TaskRecord;
use bytes::Bytes;
use futures::StreamExt;

use crate::env::{event_task, BenchEnv};
use crate::procs::Process;
use crate::scenarios::Ctx;
use crate::{db, triggers};

pub const WORKERS: usize = 2;
pub const SLOTS: u32 = 8;
const WARM_UP: usize = 200;

pub struct Stage {
    pub env: BenchEnv,
    pub scheduler: Process,
    pub workers: Vec<Process>,
    pub throughput_task: TaskRecord,
    pub latency_task: TaskRecord,
    pub delay_task: TaskRecord,
}

impl Stage {
    /// # Errors
    /// A service unreachable, or the `ax` processes not coming up.
    pub async fn start(ctx: &Ctx) -> anyhow::Result<Self> {
        let env = BenchEnv::new("tp", &ctx.servers, &ctx.log_dir, 8).await?;
        let throughput_task = env.register(event_task("tp", "noop")).await?;
        let latency_task = env.register(event_task("lat", "noop")).await?;
        let delay_task = env.register(event_task("dly", "noop")).await?;

        let mut heartbeats = env.bus.client.subscribe(env.names.heartbeat()).await?;
        let scheduler = env.spawn("scheduler", &ctx.ax, &["scheduler"])?;
        env.wait_for_leader(Duration::from_secs(30)).await?;
        let slots = SLOTS.to_string();
        let mut workers = Vec::new();
        for i in 0..WORKERS {
            // 8 slots each, and assignments taken ahead (8 unless --prefetch says
            // otherwise) so a freed slot never waits for the dispatcher's round trip
            // (AX_WORKER_PREFETCH; concurrency stays 8).
            workers.push(env.spawn(&format!("worker{i}"), &ctx.ax, &["worker", "--max-running", &slots, "--prefetch", &ctx.prefetch.to_string()])?);
        }
        let mut seen = HashSet::new();
        tokio::time::timeout(Duration::from_secs(30), async {
            while seen.len() < WORKERS {
                let Some(message) = heartbeats.next().await else { break };
                if let Ok(beat) = serde_json::from_slice::<Heartbeat>(&message.payload) {
                    seen.insert(beat.worker_id);
                }
            }
        })
        .await
        .context("the worker processes sent no heartbeat within 30 s")?;

        // Warm-up: connections, caches and the first dispatch happen before anything is timed.
        let ids: Vec<String> = (0..WARM_UP).map(|i| format!("warm-{i}")).collect();
        triggers::pipelined(&env.bus, "tp", &ids, Bytes::from_static(b"{}")).await?;
        let done = db::wait_for_state(env.store.pool(), throughput_task.id.as_str(), "SUCCEEDED", WARM_UP as u64, Duration::from_secs(60)).await?;
        anyhow::ensure!(done == WARM_UP as u64, "warm-up: only {done} of {WARM_UP} instances succeeded within 60 s");
        db::wait_for_empty_outbox(env.store.pool(), Duration::from_secs(30)).await?;
        Ok(Self { env, scheduler, workers, throughput_task, latency_task, delay_task })
    }

    /// The AX processes of the stage, by name.
    pub fn processes(&self) -> Vec<(String, u32)> {
        let mut out = vec![("ax scheduler".to_owned(), self.scheduler.pid)];
        out.extend(self.workers.iter().map(|w| (format!("ax worker ({})", w.name), w.pid)));
        out
    }

    pub async fn stop(self) {
        for worker in self.workers {
            worker.stop(Duration::from_secs(10)).await;
        }
        self.scheduler.stop(Duration::from_secs(10)).await;
        self.env.cleanup().await;
    }
}
