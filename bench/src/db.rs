//! What the harness reads from MySQL: the server's durability settings, its global
//! counters (commits, fsyncs, statements) around a window, and the audit trail,
//! whose rows tell how AX grouped transitions into commits.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ax_domain::Timestamp;
use serde::Serialize;
use sqlx::MySqlPool;

use crate::stats::{summarize, Summary};

/// Server settings that decide what a commit costs. Read, never changed.
pub async fn server_facts(pool: &MySqlPool) -> BTreeMap<String, serde_json::Value> {
    let mut facts = BTreeMap::new();
    let variables = [
        "version",
        "innodb_flush_log_at_trx_commit",
        "sync_binlog",
        "log_bin",
        "innodb_buffer_pool_size",
        "innodb_doublewrite",
        "innodb_flush_method",
        "innodb_log_file_size",
        "max_connections",
    ];
    for name in variables {
        let sql = format!("SELECT CAST(@@GLOBAL.{name} AS CHAR)");
        if let Ok(value) = sqlx::query_scalar::<_, Option<String>>(sqlx::AssertSqlSafe(sql)).fetch_one(pool).await {
            facts.insert(name.to_owned(), serde_json::Value::String(value.unwrap_or_default()));
        }
    }
    facts
}

/// The global status counters a window is judged by (MariaDB and MySQL name a few
/// differently; whichever the server has are read).
const COUNTERS: &[&str] = &[
    "Com_commit",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Questions",
    // COM_PING is not a statement: sqlx's pool pings went uncounted in `Questions`.
    "Com_admin_commands",
    "Handler_commit",
    "Innodb_data_fsyncs",
    "Innodb_os_log_fsyncs",
    "Innodb_log_writes",
    "Innodb_os_log_written",
];

#[derive(Debug, Clone, Default)]
pub struct Counters(HashMap<String, u64>);

impl Counters {
    pub async fn read(pool: &MySqlPool) -> Self {
        let rows: Vec<(String, String)> = sqlx::query_as("SHOW GLOBAL STATUS").fetch_all(pool).await.unwrap_or_default();
        Self(
            rows.into_iter()
                .filter(|(name, _)| COUNTERS.iter().any(|c| c.eq_ignore_ascii_case(name)))
                .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
                .collect(),
        )
    }

    /// Per-counter increase since `before`, server-wide (the harness's own polling
    /// and anyone else on the server are included).
    pub fn since(&self, before: &Counters) -> BTreeMap<String, u64> {
        self.0.iter().map(|(k, v)| (k.clone(), v.saturating_sub(before.0.get(k).copied().unwrap_or(0)))).collect()
    }
}

/// Instances of a task in one state, by the (task_id, state) index.
pub async fn count_in_state(pool: &MySqlPool, task_id: &str, state: &str) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE task_id = ? AND state = ?")
        .bind(task_id)
        .bind(state)
        .fetch_one(pool)
        .await?;
    Ok(n.max(0) as u64)
}

/// Polls until `task_id` has `expected` instances in `state` or `timeout` passes;
/// returns how many there were at the end.
pub async fn wait_for_state(pool: &MySqlPool, task_id: &str, state: &str, expected: u64, timeout: Duration) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = count_in_state(pool, task_id, state).await?;
        if n >= expected || tokio::time::Instant::now() >= deadline {
            return Ok(n);
        }
        // Each poll reads the task's index range (10,000 entries in scenario 1):
        // polled every 100 ms, that was 2 % of MariaDB's time in the measurement.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Polls until the outbox is empty (every committed event published) or `timeout`.
pub async fn wait_for_empty_outbox(pool: &MySqlPool, timeout: Duration) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n: i64 = sqlx::query_scalar("SELECT CAST(COALESCE(SUM(events), 0) AS SIGNED) FROM outbox_batches").fetch_one(pool).await?;
        if n == 0 || tokio::time::Instant::now() >= deadline {
            return Ok(n.max(0) as u64);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How AX grouped one kind of transition into commits.
#[derive(Debug, Clone, Serialize)]
pub struct CommitGroup {
    pub kind: &'static str,
    pub commits: usize,
    pub transitions: u64,
    pub mean_batch: f64,
    pub max_batch: u64,
}

/// Commits of a task's transitions since `since`, grouped by the path that made them.
///
/// Every transaction stamps its audit rows with one `now`, so rows sharing a
/// `created_at` were one commit (two commits in the same microsecond would be
/// counted as one; rare enough not to move the figures).
pub async fn commit_groups(pool: &MySqlPool, task_name: &str, since: Timestamp) -> anyhow::Result<Vec<CommitGroup>> {
    let rows: Vec<(Timestamp, String, i64)> = sqlx::query_as(
        "SELECT created_at, to_state, COUNT(*) FROM instance_transitions WHERE task_name = ? AND created_at >= ? GROUP BY created_at, to_state",
    )
    .bind(task_name)
    .bind(since)
    .fetch_all(pool)
    .await?;
    let mut commits: BTreeMap<Timestamp, (Vec<String>, u64)> = BTreeMap::new();
    for (at, state, n) in rows {
        let entry = commits.entry(at).or_default();
        entry.0.push(state);
        entry.1 += n.max(0) as u64;
    }
    let mut groups: BTreeMap<&'static str, (usize, u64, u64)> = BTreeMap::new();
    for (states, n) in commits.values() {
        let kind = if states.iter().any(|s| s == "CREATED") {
            "intake (CREATED)"
        } else if states.iter().any(|s| s == "DISPATCHED") {
            "dispatch (DISPATCHED)"
        } else if states.iter().any(|s| s == "RUNNING" || s == "SUCCEEDED") {
            "reports (RUNNING/SUCCEEDED)"
        } else {
            "other"
        };
        let g = groups.entry(kind).or_default();
        g.0 += 1;
        g.1 += n;
        g.2 = g.2.max(*n);
    }
    Ok(groups
        .into_iter()
        .map(|(kind, (commits, transitions, max_batch))| CommitGroup {
            kind,
            commits,
            transitions,
            mean_batch: transitions as f64 / commits.max(1) as f64,
            max_batch,
        })
        .collect())
}

/// Where an instance's time went, from the audit trail: waiting for dispatch,
/// dispatch → RUNNING (Redis push, pop, the RUNNING report's round trip and group
/// commit), RUNNING → SUCCEEDED (reply, handler, the outcome's round trip and
/// commit), and how long a worker's freed slot stayed empty (its SUCCEEDED commit
/// to the next DISPATCHED commit for that worker).
#[derive(Debug, Clone, Serialize)]
pub struct Stages {
    pub created_to_dispatched_ms: Option<Summary>,
    pub dispatched_to_running_ms: Option<Summary>,
    pub running_to_succeeded_ms: Option<Summary>,
    pub slot_refill_ms: Option<Summary>,
}

/// # Errors
/// MySQL failing.
pub async fn stages(pool: &MySqlPool, task_name: &str, since: Timestamp) -> anyhow::Result<Stages> {
    let rows: Vec<(String, String, Timestamp, Option<String>)> = sqlx::query_as(
        "SELECT instance_id, to_state, created_at, worker_id FROM instance_transitions WHERE task_name = ? AND created_at >= ? ORDER BY created_at",
    )
    .bind(task_name)
    .bind(since)
    .fetch_all(pool)
    .await?;
    let mut at: HashMap<(&str, &str), Timestamp> = HashMap::new();
    let mut by_worker: HashMap<&str, Vec<(Timestamp, bool)>> = HashMap::new();
    for (instance, state, created_at, worker) in &rows {
        at.insert((instance.as_str(), state.as_str()), *created_at);
        if let Some(worker) = worker {
            match state.as_str() {
                "DISPATCHED" => by_worker.entry(worker.as_str()).or_default().push((*created_at, true)),
                "SUCCEEDED" => by_worker.entry(worker.as_str()).or_default().push((*created_at, false)),
                _ => {}
            }
        }
    }
    let ms = |a: Timestamp, b: Timestamp| (b - a).as_seconds_f64() * 1000.0;
    let between = |from: &str, to: &str| -> Vec<f64> {
        rows.iter()
            .filter(|(_, state, _, _)| state == to)
            .filter_map(|(instance, _, t, _)| at.get(&(instance.as_str(), from)).map(|f| ms(*f, *t)))
            .collect()
    };
    let mut refill = Vec::new();
    for events in by_worker.values() {
        // Events are in commit order; each SUCCEEDED frees a slot the next DISPATCHED fills.
        let mut freed: std::collections::VecDeque<Timestamp> = std::collections::VecDeque::new();
        for (t, dispatched) in events {
            if *dispatched {
                if let Some(f) = freed.pop_front() {
                    refill.push(ms(f, *t));
                }
            } else {
                freed.push_back(*t);
            }
        }
    }
    Ok(Stages {
        created_to_dispatched_ms: summarize(&mut between("CREATED", "DISPATCHED")),
        dispatched_to_running_ms: summarize(&mut between("DISPATCHED", "RUNNING")),
        running_to_succeeded_ms: summarize(&mut between("RUNNING", "SUCCEEDED")),
        slot_refill_ms: summarize(&mut refill),
    })
}

/// Seconds from `a` to `b`.
pub fn seconds_between(a: Timestamp, b: Timestamp) -> f64 {
    (b - a).as_seconds_f64()
}
