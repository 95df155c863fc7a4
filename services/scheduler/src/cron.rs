//! Cron on the leader: a planner that reads the schedules due in the next few
//! seconds from MySQL (an index range, never a scan of every task).
//!
//! A fire creates its instance and advances the schedule in one fenced
//! transaction, with trigger id `cron:<trigger index>:<fire time ms>`, so a fire
//! happens at most once across restarts, failovers and double planning. For a
//! task without a concurrency limit the planner does this as the fire enters the
//! window, up to `WINDOW` ahead: the instance is due at the fire time, the timer
//! wakes the dispatcher then, which cancels it if the task was disabled by then;
//! deleting the task or changing the trigger cancels what is not due yet at once.
//! A task with a limit has its fire indexed in Redis and created at its second by
//! the timer, as the limit is decided on what runs then. Fires that were missed
//! (no leader, a disabled task enabled again) follow the trigger's misfire policy.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_domain::cron_expr::CronSchedule;
use ax_domain::ids::TaskId;
use ax_domain::task::{MisfirePolicy, TaskDefinition, TriggerSpec};
use ax_domain::Timestamp;
use ax_queue::DueIndex;
use ax_store::schedules::{CronFire, CronRow, Fired};
use ax_store::{NewInstance, StoreError};
use chrono::TimeDelta;
use futures::StreamExt;

use crate::leader::Term;
use crate::{dispatch, metrics, pieces, timers, Shared};

/// How far ahead fires are planned (and, without a concurrency limit, created).
const WINDOW: TimeDelta = TimeDelta::seconds(3);
const PLAN_EVERY: Duration = Duration::from_millis(500);
/// A fire older than this when first seen was missed, not merely late.
const MISFIRE_GRACE: TimeDelta = TimeDelta::seconds(2);
/// Re-plan from MySQL now and then (after a Redis flush, nothing is lost).
const REPLAN_EVERY: Duration = Duration::from_secs(15);
const READ_LIMIT: u32 = 20_000;

/// Fires planned by this leader, by due-index member.
pub type Planned = Arc<Mutex<HashMap<String, CronRow>>>;

fn member(row: &CronRow, fire: Timestamp) -> String {
    format!("c:{}:{}:{}", row.task_id, row.trigger_index, fire.timestamp_millis())
}

/// Parsed expressions, by (expression, zone); parsing is not free and 100,000
/// tasks share few distinct expressions.
#[derive(Default)]
struct Schedules(HashMap<(String, String), Option<CronSchedule>>);

impl Schedules {
    fn get(&mut self, row: &CronRow) -> Option<&CronSchedule> {
        self.0
            .entry((row.expression.clone(), row.timezone.clone()))
            .or_insert_with(|| CronSchedule::parse(&row.expression, &row.timezone).ok())
            .as_ref()
    }
}

/// The leader's in-memory plan: every schedule it has seen, in a min-heap by its
/// next fire not yet indexed in Redis. MySQL is read only for schedules entering
/// the window (a range on `next_fire_at` past a cursor) and for tasks that changed,
/// so 100,000 schedules cost a heap, not 100,000 reads a minute.
struct Plan {
    heap: BinaryHeap<Reverse<(Timestamp, Key, u64)>>,
    rows: HashMap<Key, (CronRow, u64)>,
    generation: u64,
    cursor: Timestamp,
    schedules: Schedules,
}

type Key = (String, u16);

impl Plan {
    fn new() -> Self {
        Self { heap: BinaryHeap::new(), rows: HashMap::new(), generation: 0, cursor: epoch_start(), schedules: Schedules::default() }
    }

    fn track(&mut self, row: CronRow, first_unplanned: Timestamp) {
        self.generation += 1;
        let key = (row.task_id.clone(), row.trigger_index);
        self.heap.push(Reverse((first_unplanned, key.clone(), self.generation)));
        self.rows.insert(key, (row, self.generation));
    }

    fn forget_task(&mut self, task_name: &str) {
        self.rows.retain(|_, (row, _)| row.task_name != task_name);
    }
}

fn epoch_start() -> Timestamp {
    Timestamp::from(std::time::UNIX_EPOCH)
}

pub(crate) async fn plan(shared: Shared, term: Term) -> anyhow::Result<()> {
    let due = DueIndex::new(&shared.deps.queues);
    let mut task_events = shared.deps.bus.client.subscribe(format!("{}.event.task.*.*", shared.deps.bus.names.namespace())).await?;
    let mut plan = Plan::new();
    let mut last_replan = tokio::time::Instant::now();
    let mut changed: Vec<String> = Vec::new();
    loop {
        if last_replan.elapsed() >= REPLAN_EVERY || shared.replan.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // From scratch now and then: whatever Redis lost is indexed again.
            plan = Plan::new();
            last_replan = tokio::time::Instant::now();
        }
        match plan_pass(&shared, &term, &due, &mut plan, std::mem::take(&mut changed)).await {
            Ok(()) => {}
            Err(err) => {
                if matches!(err.downcast_ref::<StoreError>(), Some(StoreError::Fenced { .. })) {
                    ::metrics::counter!(metrics::FENCED_WRITES).increment(1);
                    term.token.cancel();
                    return Ok(());
                }
                tracing::warn!(error = ?err, "cron planning pass failed");
                ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "cron_plan").increment(1);
                plan = Plan::new();
            }
        }
        tokio::select! {
            biased;
            _ = term.token.cancelled() => return Ok(()),
            Some(message) = task_events.next() => {
                // ax.event.task.<task>.<action>: reload that task's schedules at once.
                if let Some(task) = message.headers.as_ref().and_then(|h| h.get("Ax-Task")).map(|v| v.as_str().to_owned()) {
                    changed.push(task);
                }
            }
            _ = tokio::time::sleep(PLAN_EVERY) => {}
        }
    }
}

/// One pass: reload changed tasks, discover schedules entering the window, index
/// every fire up to the window's end, handle misfires.
async fn plan_pass(shared: &Shared, term: &Term, due: &DueIndex, plan: &mut Plan, changed: Vec<String>) -> anyhow::Result<()> {
    let now = ax_domain::now();
    let until = now + WINDOW;
    let mut misfires = Vec::new();
    let mut fresh: Vec<CronRow> = Vec::new();
    for task in changed {
        plan.forget_task(&task);
        fresh.extend(shared.deps.store.active_schedules_of(&task).await?);
    }
    let entering = shared.deps.store.cron_due(plan.cursor, until, READ_LIMIT).await?;
    plan.cursor = if entering.len() as u32 == READ_LIMIT { entering.last().map(|r| r.next_fire_at).unwrap_or(until) } else { until };
    fresh.extend(entering.into_iter().filter(|r| !plan.rows.contains_key(&(r.task_id.clone(), r.trigger_index))));
    for row in fresh {
        let Some(schedule) = plan.schedules.get(&row).cloned() else {
            tracing::warn!(task = %row.task_name, expression = %row.expression, "stored cron expression no longer parses; skipped");
            continue;
        };
        if row.next_fire_at < now - MISFIRE_GRACE {
            if let Some(fire) = misfire(shared, &row, &schedule, now, term.fence.epoch).await? {
                let next = fire.new_next;
                misfires.push(fire);
                let mut row = row;
                row.next_fire_at = next;
                plan.track(row, next);
            }
            continue;
        }
        let first = row.next_fire_at;
        plan.track(row, first);
    }

    // Fires entering the window, in time order (a schedule's fire n before n + 1).
    let mut entering: Vec<(CronRow, Timestamp, Option<Timestamp>)> = Vec::new();
    while let Some(Reverse((fire, _, _))) = plan.heap.peek() {
        if *fire > until {
            break;
        }
        let Reverse((fire, key, generation)) = plan.heap.pop().expect("peeked");
        let Some((row, current)) = plan.rows.get(&key) else { continue };
        if *current != generation {
            continue; // superseded by a reload
        }
        let row = row.clone();
        let next = plan.schedules.get(&row).and_then(|s| s.next_after(fire));
        if let Some(next) = next {
            plan.heap.push(Reverse((next, key, generation)));
        }
        entering.push((row, fire, next));
    }
    if !misfires.is_empty() {
        let outcomes = shared.deps.store.fire_cron(&misfires, Some(term.fence)).await?;
        tracing::info!(schedules = misfires.len(), instances = outcomes.len(), "missed cron fires handled by their misfire policy");
        dispatch::kick(shared).await;
    }
    if !entering.is_empty() {
        plan_fires(shared, term, due, entering).await?;
    }
    Ok(())
}

/// Fires entering the window. A task without a concurrency limit has its fire's
/// instance created now, due at the fire time, and indexed for the timer, which
/// wakes the dispatcher at that time: the commit is off the fire instant, where
/// 1,667 tasks sharing a second made the last of them wait for all the others
/// (p99 586 ms). A task with a limit has the fire indexed and created at its
/// time ([`fire`]): the limit is decided on what is active then.
async fn plan_fires(shared: &Shared, term: &Term, due: &DueIndex, entering: Vec<(CronRow, Timestamp, Option<Timestamp>)>) -> anyhow::Result<()> {
    let entering: Vec<(CronRow, TaskId, Timestamp, Option<Timestamp>)> = entering
        .into_iter()
        .filter_map(|(row, fire, next)| {
            let task_id = row.task_id.parse().ok()?;
            Some((row, task_id, fire, next))
        })
        .collect();
    let wanted: Vec<(TaskId, u32)> = entering.iter().map(|(row, task_id, _, _)| (task_id.clone(), row.task_version)).collect();
    let definitions = shared.tasks.get_many(&wanted).await?;
    let operator = format!("cron@{}", term.fence.epoch);
    let mut ahead = Vec::new();
    let mut entries = Vec::new();
    {
        let mut planned = shared.planned.lock().expect("planned lock");
        for (row, task_id, fire, next) in entering {
            let Some(definition) = definitions.get(&(task_id.clone(), row.task_version)) else {
                tracing::warn!(task = %row.task_name, version = row.task_version, "cron schedule names a task version that does not exist; skipped");
                continue;
            };
            if definition.concurrency.max_running_instances.is_some() {
                let member = member(&row, fire);
                entries.push((member.clone(), fire.timestamp_millis()));
                planned.insert(member, row);
                continue;
            }
            let Some(new_next) = next else { continue }; // the last fire there is (a past year): never moves on
            ahead.push(CronFire {
                task_id,
                trigger_index: row.trigger_index,
                task_version: row.task_version,
                expected_next: fire,
                new_next,
                instances: vec![new_instance(&row, definition, fire, &operator)],
            });
        }
    }
    if !entries.is_empty() {
        due.add(&entries).await?;
        shared.timer_wake.notify_one();
    }
    // Several transactions at once: one after another fell behind 1,667 fires a
    // second once the instances outgrew MySQL's buffer pool (each insert waiting on
    // a page read). A task's fires share a piece, so a schedule's fire n + 1 is
    // taken only after n has moved it, and two pieces never lock one task row.
    let mut in_flight = futures::stream::iter(ahead_pieces(ahead))
        .map(|piece| async move { shared.deps.store.fire_cron(&piece, Some(term.fence)).await })
        .buffer_unordered(AHEAD_IN_FLIGHT);
    // A failed piece does not stop the others: what they committed is indexed for
    // the timer before the error goes up (and the plan is read again from MySQL).
    let mut failed = None;
    while let Some(done) = in_flight.next().await {
        let fired = match done {
            Ok(fired) => fired,
            Err(err) => {
                failed.get_or_insert(err);
                continue;
            }
        };
        count_fires(&fired);
        let entries: Vec<(String, i64)> = fired.iter().map(|f| (timers::fire_member(f.outcome.instance_id().as_str()), timers::due_score(f.due_at))).collect();
        due.add(&entries).await?;
        shared.timer_wake.notify_one();
    }
    match failed {
        Some(err) => Err(err.into()),
        None => Ok(()),
    }
}

/// Counts the fires that created an instance. Not by task: 100,000 cron tasks would
/// be 100,000 series (a task's fires are its instances).
fn count_fires(fired: &[Fired]) {
    let created = fired.iter().filter(|f| matches!(f.outcome, ax_store::CreateOutcome::Created(_))).count();
    ::metrics::counter!(metrics::CRON_FIRES).increment(created as u64);
}

/// Fires created ahead per transaction, and transactions at once.
const AHEAD_PIECE: usize = 256;
const AHEAD_IN_FLIGHT: usize = 4;

/// `fires` in pieces of about [`AHEAD_PIECE`]: all of a task's fires in one piece,
/// in time order.
fn ahead_pieces(mut fires: Vec<CronFire>) -> Vec<Vec<CronFire>> {
    fires.sort_by(|a, b| (&a.task_id, a.expected_next).cmp(&(&b.task_id, b.expected_next)));
    pieces::keeping_groups(fires, AHEAD_PIECE, |a, b| a.task_id == b.task_id)
}

fn definition_trigger(definition: &TaskDefinition, index: u16) -> Option<(MisfirePolicy, u32)> {
    match definition.triggers.get(index as usize)? {
        TriggerSpec::Cron { misfire, misfire_limit, .. } => Some((*misfire, *misfire_limit)),
        _ => None,
    }
}

async fn misfire(shared: &Shared, row: &CronRow, schedule: &CronSchedule, now: Timestamp, epoch: u64) -> anyhow::Result<Option<CronFire>> {
    let task_id: TaskId = row.task_id.parse()?;
    let Some(definition) = shared.tasks.get(&task_id, row.task_version).await? else { return Ok(None) };
    let (policy, limit) = definition_trigger(&definition, row.trigger_index).unwrap_or((MisfirePolicy::FireOnce, 1));
    let missed = std::iter::once(row.next_fire_at)
        .chain(schedule.fires_between(row.next_fire_at, now, limit as usize))
        .take(limit as usize + 1)
        .collect::<Vec<_>>();
    let chosen: Vec<Timestamp> = match policy {
        MisfirePolicy::Skip => Vec::new(),
        MisfirePolicy::FireOnce => missed.last().copied().into_iter().collect(),
        MisfirePolicy::FireAll => missed.iter().copied().take(limit as usize).collect(),
    };
    let policy_name = match policy {
        MisfirePolicy::Skip => "skip",
        MisfirePolicy::FireOnce => "fire_once",
        MisfirePolicy::FireAll => "fire_all",
    };
    ::metrics::counter!(metrics::CRON_MISFIRES, "task" => row.task_name.clone(), "policy" => policy_name).increment(missed.len() as u64);
    let Some(new_next) = schedule.next_after(now) else { return Ok(None) };
    Ok(Some(CronFire {
        task_id,
        trigger_index: row.trigger_index,
        task_version: row.task_version,
        expected_next: row.next_fire_at,
        new_next,
        instances: chosen.into_iter().map(|fire| new_instance(row, &definition, fire, &format!("cron-misfire@{epoch}"))).collect(),
    }))
}

fn new_instance(row: &CronRow, definition: &TaskDefinition, fire: Timestamp, operator: &str) -> NewInstance {
    let task_id: TaskId = row.task_id.parse().expect("schedule rows hold valid task ids");
    NewInstance::for_cron_fire(&task_id, row.task_version, definition, row.trigger_index, fire, operator)
}

/// Fires planned cron entries that are due; returns the members handled.
pub(crate) async fn fire(shared: &Shared, term: &Term, members: &[(String, i64)]) -> anyhow::Result<Vec<String>> {
    let mut handled = Vec::with_capacity(members.len());
    let mut schedules = Schedules::default();
    let mut rows = Vec::with_capacity(members.len());
    for (key, fire_ms) in members {
        handled.push(key.clone());
        let planned = shared.planned.lock().expect("planned lock").get(key).cloned();
        let row = match planned {
            Some(row) => row,
            None => match lookup(shared, key).await? {
                Some(row) => row,
                None => continue, // the schedule is gone or moved on
            },
        };
        let Ok(task_id) = row.task_id.parse::<TaskId>() else { continue };
        rows.push((row, task_id, *fire_ms));
    }
    let wanted: Vec<(TaskId, u32)> = rows.iter().map(|(row, task_id, _)| (task_id.clone(), row.task_version)).collect();
    let definitions = shared.tasks.get_many(&wanted).await?;
    let mut fires = Vec::with_capacity(rows.len());
    for (row, task_id, fire_ms) in rows {
        let fire_at = chrono::DateTime::from_timestamp_millis(fire_ms).unwrap_or_default();
        let Some(schedule) = schedules.get(&row).cloned() else { continue };
        let Some(new_next) = schedule.next_after(fire_at) else { continue };
        let Some(definition) = definitions.get(&(task_id.clone(), row.task_version)) else { continue };
        fires.push(CronFire {
            task_id,
            trigger_index: row.trigger_index,
            task_version: row.task_version,
            expected_next: fire_at,
            new_next,
            instances: vec![new_instance(&row, definition, fire_at, &format!("cron@{}", term.fence.epoch))],
        });
    }
    if fires.is_empty() {
        return Ok(handled);
    }
    let outcomes = match shared.deps.store.fire_cron(&fires, Some(term.fence)).await {
        Ok(outcomes) => outcomes,
        Err(err @ StoreError::Fenced { .. }) => {
            ::metrics::counter!(metrics::FENCED_WRITES).increment(1);
            term.token.cancel();
            return Err(err.into());
        }
        Err(err) => return Err(err.into()),
    };
    let now = ax_domain::now();
    for fire in &fires {
        ::metrics::histogram!(metrics::CRON_FIRE_SKEW).record((now - fire.expected_next).as_seconds_f64().max(0.0));
    }
    count_fires(&outcomes);
    {
        let mut planned = shared.planned.lock().expect("planned lock");
        for key in &handled {
            planned.remove(key);
        }
    }
    if !outcomes.is_empty() {
        dispatch::kick(shared).await;
    }
    Ok(handled)
}

/// A member planned by an earlier leader: its schedule row, if it still waits for that fire.
async fn lookup(shared: &Shared, key: &str) -> anyhow::Result<Option<CronRow>> {
    let mut parts = key.splitn(4, ':');
    let (Some("c"), Some(task_id), Some(index), Some(fire_ms)) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Ok(None);
    };
    let (Ok(task_id), Ok(index), Ok(fire_ms)) = (task_id.parse::<TaskId>(), index.parse::<u16>(), fire_ms.parse::<i64>()) else {
        return Ok(None);
    };
    let rows = shared.deps.store.cron_schedules_of(&task_id).await?;
    Ok(rows.into_iter().find(|r| r.trigger_index == index && r.next_fire_at.timestamp_millis() == fire_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_fires_created_ahead_share_one_piece_in_time_order() {
        let tasks: Vec<TaskId> = (0..300).map(|_| TaskId::generate()).collect();
        let at = |s: i64| Timestamp::from_timestamp(1_800_000_000 + s, 0).unwrap();
        // In time order, as the planner's heap hands them out: second 0 of every task, then second 1.
        let fires: Vec<CronFire> = (0..2)
            .flat_map(|second| {
                tasks.iter().map(move |task_id| CronFire { task_id: task_id.clone(), trigger_index: 0, task_version: 1, expected_next: at(second), new_next: at(second + 1), instances: Vec::new() })
            })
            .collect();
        let pieces = ahead_pieces(fires);
        assert_eq!(pieces.iter().map(Vec::len).sum::<usize>(), 600);
        assert!(pieces.iter().all(|p| p.len() <= AHEAD_PIECE + 1), "pieces stay near {AHEAD_PIECE}");
        for task_id in &tasks {
            let holding: Vec<&Vec<CronFire>> = pieces.iter().filter(|p| p.iter().any(|f| &f.task_id == task_id)).collect();
            assert_eq!(holding.len(), 1, "one piece holds all of {task_id}'s fires");
            let times: Vec<Timestamp> = holding[0].iter().filter(|f| &f.task_id == task_id).map(|f| f.expected_next).collect();
            assert_eq!(times, [at(0), at(1)]);
        }
    }
}
