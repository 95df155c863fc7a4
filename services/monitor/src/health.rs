//! The monthly task health report (seed 6): at each fire of
//! `AX_HEALTH_REPORT_CRON` (UTC) the report for the time since the previous fire
//! is made, stored, published as a `HealthReported` event (through the outbox)
//! and queued for every channel that takes reports, all in one transaction. Of
//! several monitors, the first to store the fire's report wins; the others find
//! it there. A fire missed while no monitor ran is made up at start, if it is at
//! most a week old and some task was registered before it (a fresh installation
//! has nothing to report on).

use std::time::Duration;

use ax_domain::cron_expr::CronSchedule;
use ax_domain::ids::ReportId;
use ax_domain::Timestamp;
use ax_runtime::Config;
use ax_store::Store;
use tokio_util::sync::CancellationToken;

use crate::{metrics, Shared};

/// The longest the loop sleeps before looking at the clock again, so a
/// suspended host or a changed clock does not make it miss a fire by much.
const NAP: Duration = Duration::from_secs(3600);
const CATCH_UP: chrono::TimeDelta = chrono::TimeDelta::days(7);

pub(crate) async fn run(shared: Shared, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Some(schedule) = shared.config.observe.monitor.health_report_schedule() else {
        tracing::info!("task health report disabled (AX_HEALTH_REPORT_CRON=off)");
        return Ok(());
    };
    let now = ax_domain::now();
    if let Some(missed) = schedule.previous_before(now).filter(|fire| *fire > now - CATCH_UP) {
        let store = &shared.deps.store;
        let missed_one = async {
            let first = store.first_task_registered_at().await?;
            Ok::<bool, ax_store::StoreError>(first.is_some_and(|first| first < missed) && !store.health_report_exists(missed).await?)
        };
        match missed_one.await {
            Ok(true) => make_and_wake(&shared, missed).await,
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, "cannot look for a missed health report"),
        }
    }
    loop {
        let Some(next) = schedule.next_after(ax_domain::now()) else { return Ok(()) };
        loop {
            let left = (next - ax_domain::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                break;
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(left.min(NAP)) => {}
            }
        }
        make_and_wake(&shared, next).await;
    }
}

async fn make_and_wake(shared: &Shared, fire: Timestamp) {
    match make(&shared.deps.store, &shared.config, fire).await {
        Ok(Some(_)) => shared.notify_wake.notify_one(),
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(error = %err, %fire, "task health report failed");
            ::metrics::counter!(metrics::LOOP_FAILURES, "loop" => "health_report").increment(1);
        }
    }
}

/// Makes, stores and publishes the report answering the fire at `fire`; `None`
/// if that fire already has one.
///
/// # Errors
/// MySQL failures, or a schedule that does not parse.
pub async fn make(store: &Store, config: &Config, fire: Timestamp) -> anyhow::Result<Option<ReportId>> {
    let settings = &config.observe.monitor;
    let schedule = settings.health_report_schedule().unwrap_or(CronSchedule::parse("0 9 1 * *", "UTC")?);
    let since = schedule.previous_before(fire).unwrap_or(fire - chrono::TimeDelta::days(31));
    let stats = store.health_stats(since, fire).await?;
    let report = ax_domain::health::report(stats, &settings.health_settings(), since, fire, ax_domain::now());
    let channels: Vec<String> =
        store.alert_channels().await?.into_iter().map(|c| c.definition).filter(|c| c.enabled && c.reports).map(|c| c.name).collect();
    let saved = store.save_health_report(fire, &report, &channels).await?;
    if let Some(id) = &saved {
        ::metrics::counter!(metrics::HEALTH_REPORTS).increment(1);
        tracing::info!(report_id = %id, %since, until = %fire, tasks = report.tasks_total, flagged = report.tasks_flagged, channels = channels.len(), "task health report made");
    }
    Ok(saved)
}
