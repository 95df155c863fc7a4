//! Scenario 1, throughput: `count` instances of a no-op task, fired through
//! `ax.trigger.<task>` as fast as the client allows (pipelined publishes), run
//! by two worker processes with 8 slots each.
//!
//! Figures: the client's publish rate, the intake rate (first publish to last
//! instance committed), end to end (first CREATED to last SUCCEEDED, from MySQL),
//! and events published per second (from `AX_EVENTS`' own timestamps). Details:
//! how the transitions were grouped into commits, the MySQL counters and where
//! the CPU went.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::db::{self, seconds_between, Counters};
use crate::procs::{CpuMeter, Perf};
use crate::report::{Figure, Report, Target, Unit};
use crate::scenarios::ceilings::AxFigures;
use crate::scenarios::stage::Stage;
use crate::scenarios::{with_backing_services, Ctx};
use crate::stats::rate;
use crate::triggers;

const S: &str = "1 throughput";

/// Runs the scenario; returns what AX achieved, for the latency scenario's rate and
/// the ceilings' ratio (`None` when not every instance finished).
///
/// # Errors
/// A service failed under the harness (not a missed target: those are figures).
pub async fn run(ctx: &Ctx, stage: &Stage, count: usize, report: &mut Report) -> anyhow::Result<Option<AxFigures>> {
    let env = &stage.env;
    let pool = env.store.pool();
    let task = &stage.throughput_task;
    let already = db::count_in_state(pool, task.id.as_str(), "SUCCEEDED").await?;
    let events = env.bus.jetstream.get_stream(env.names.stream("AX_EVENTS")).await?;
    let seq_before = events.get_info().await?.state.last_sequence;

    let processes = with_backing_services(stage.processes());
    let counters_before = Counters::read(pool).await;
    let cpu = CpuMeter::start(&processes);
    let perf = ctx.perf.then(|| {
        let pids: Vec<u32> = processes.iter().filter(|(n, _)| !n.starts_with("ax-bench")).map(|(_, p)| *p).collect();
        Perf::start(&pids, ctx.log_dir.join("throughput.perf.data"))
    });

    let ids: Vec<String> = (0..count).map(|i| format!("tp-{i}")).collect();
    let (sent, publish_time) = triggers::pipelined(&env.bus, "tp", &ids, Bytes::from_static(b"{}")).await?;
    let first_publish = sent.first().map(|s| s.at).unwrap_or_else(ax_domain::now);
    let expected = already + count as u64;
    let timeout = Duration::from_secs(300);
    let done = db::wait_for_state(pool, task.id.as_str(), "SUCCEEDED", expected, timeout).await? - already;
    let outbox_left = db::wait_for_empty_outbox(pool, Duration::from_secs(60)).await?;

    let cpu_use = cpu.finish();
    let counters = Counters::read(pool).await.since(&counters_before);
    let profile = perf.and_then(Perf::finish);

    let (first_created, last_created, last_finished): (Option<ax_domain::Timestamp>, Option<ax_domain::Timestamp>, Option<ax_domain::Timestamp>) =
        sqlx::query_as("SELECT MIN(created_at), MAX(created_at), MAX(finished_at) FROM instances WHERE task_id = ? AND trigger_id LIKE 'tp-%'")
            .bind(task.id.as_str())
            .fetch_one(pool)
            .await?;
    let transitions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instance_transitions WHERE task_name = 'tp' AND created_at >= ?")
        .bind(first_publish)
        .fetch_one(pool)
        .await?;
    let info = events.get_info().await?.state;
    let published = info.last_sequence.saturating_sub(seq_before);
    let events_rate = if published > 1 {
        let first = events.get_raw_message(seq_before + 1).await?.time;
        rate(published - 1, (info.last_timestamp - first).as_seconds_f64())
    } else {
        None
    };
    let groups = db::commit_groups(pool, "tp", first_publish).await?;
    let stages = db::stages(pool, "tp", first_publish).await?;

    let intake = last_created.and_then(|last| rate(count as u64, seconds_between(first_publish, last)));
    let e2e = match (first_created, last_finished) {
        (Some(a), Some(b)) if done == count as u64 => rate(count as u64, seconds_between(a, b)),
        _ => None,
    };
    report.push(
        Figure::new(S, "trigger publish, client → JetStream acked", rate(count as u64, publish_time.as_secs_f64()), Unit::PerSec)
            .note(format!("{count} pipelined publishes with Nats-Msg-Id, the client's default window of 5,000 acks in flight")),
    );
    report.push(
        Figure::new(S, "trigger intake, first publish → last CREATED", intake, Unit::PerSec)
            .target(Target::AtLeast(15_000.0))
            .note("instances committed in MySQL while dispatch and reports run alongside"),
    );
    report.push(
        Figure::new(S, "end to end, first CREATED → last SUCCEEDED", e2e, Unit::PerSec)
            .target(Target::AtLeast(2_500.0))
            .note(format!("{done} of {count} succeeded within {}s; 2 `ax worker` processes × {} slots", timeout.as_secs(), crate::scenarios::stage::SLOTS)),
    );
    report.push(
        Figure::new(S, "events published (AX_EVENTS, first → last)", events_rate, Unit::PerSec)
            .note(format!("{published} events for {count} instances; outbox rows left: {outbox_left}")),
    );
    let transitions_per_instance = transitions as f64 / count.max(1) as f64;
    report.push(Figure::new(S, "transitions per instance", Some(transitions_per_instance), Unit::Decimal));
    let commits = counters.get("Com_commit").copied().unwrap_or(0);
    report.push(
        Figure::new(S, "MySQL commits per instance", Some(commits as f64 / count.max(1) as f64), Unit::Decimal)
            .note("server-wide Com_commit over the window, every statement included"),
    );
    let statements = counters.get("Questions").copied().unwrap_or(0);
    report.push(
        Figure::new(S, "MySQL statements per instance", Some(statements as f64 / count.max(1) as f64), Unit::Decimal)
            .note("server-wide Questions over the window: statements AX sent per instance"),
    );
    let pings = counters.get("Com_admin_commands").copied().unwrap_or(0);
    report.push(
        Figure::new(S, "MySQL pings per instance", Some(pings as f64 / count.max(1) as f64), Unit::Decimal)
            .note("server-wide Com_admin_commands over the window: round trips beside the statements (sqlx's pool pings a connection it takes or returns)"),
    );
    if let Some(refill) = stages.slot_refill_ms {
        report.push(
            Figure::new(S, "freed worker slot → next dispatch p50", Some(refill.p50), Unit::Ms)
                .note("SUCCEEDED commit to the next DISPATCHED commit for that worker: the dispatch round trip every slot waits"),
        );
    }
    if let Some(cycle) = stages.dispatched_to_running_ms.zip(stages.running_to_succeeded_ms) {
        report.push(
            Figure::new(S, "DISPATCHED → SUCCEEDED p50 (no-op handler)", Some(cycle.0.p50 + cycle.1.p50), Unit::Ms)
                .note("push, pop, two report round trips and their group commits"),
        );
    }
    report.detail(
        "throughput",
        json!({
            "instances": count,
            "succeeded": done,
            "publish_seconds": publish_time.as_secs_f64(),
            "first_publish": first_publish,
            "first_created": first_created,
            "last_created": last_created,
            "last_succeeded": last_finished,
            "events_published": published,
            "transitions": transitions,
            "commit_groups": groups,
            "stages": stages,
            "mysql_counters": counters,
            "cpu": cpu_use,
            "perf_data": profile.map(|p| p.display().to_string()),
        }),
    );
    Ok(e2e.map(|instances_per_sec| AxFigures { instances_per_sec, transitions_per_instance }))
}
