//! Leader election (seed 2.2): a MySQL named lock held on a dedicated connection.
//!
//! - The lock connection sets a short `wait_timeout`, so if this process freezes
//!   (SIGSTOP, a long GC-like stall, a hung VM) MySQL drops the connection and the
//!   lock within seconds and a standby takes over; a killed process loses it at once.
//! - The leader checks every second that it still holds the lock; on any doubt it
//!   stops leader work immediately.
//! - Each term has an epoch (`scheduler_leader.epoch`); leader writes carry it and
//!   MySQL refuses them once a newer term began, so a paused ex-leader that wakes up
//!   cannot dispatch or fire anything, even before it notices it lost the lock.

use std::time::Duration;

use ax_domain::retry::ExponentialBackoff;
use ax_store::leader::LeaderLock;
use ax_store::{Fence, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the leader confirms it still holds the lock.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// MySQL drops an idle lock connection after this many seconds; the leader's checks
/// keep it busy, a frozen leader's goes idle and is dropped.
const LOCK_IDLE_TIMEOUT_SEC: u32 = 3;

/// One leadership term: its fence for writes and a token cancelled when it ends.
#[derive(Clone, Debug)]
pub struct Term {
    pub fence: Fence,
    pub token: CancellationToken,
}

pub type TermRx = watch::Receiver<Option<Term>>;

pub async fn run(store: Store, holder: String, term_tx: watch::Sender<Option<Term>>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut backoff = ExponentialBackoff::new(Duration::from_millis(200), Duration::from_secs(5));
    while !shutdown.is_cancelled() {
        let mut lock = match store.leader_lock(LOCK_IDLE_TIMEOUT_SEC).await {
            Ok(lock) => lock,
            Err(err) => {
                tracing::warn!(error = %err, "leader election cannot reach MySQL; retrying");
                tokio::select! { _ = shutdown.cancelled() => break, _ = tokio::time::sleep(backoff.next_delay()) => continue }
            }
        };
        backoff.reset();
        // Wait for the lock, one second at a time so shutdown is noticed.
        let acquired = loop {
            if shutdown.is_cancelled() {
                break false;
            }
            match lock.acquire(1).await {
                Ok(true) => break true,
                Ok(false) => continue,
                Err(err) => {
                    tracing::warn!(error = %err, "waiting for the leader lock failed; reconnecting");
                    break false;
                }
            }
        };
        if !acquired {
            lock.release().await;
            continue;
        }
        let fence = match store.claim_leadership(&holder, ax_domain::now()).await {
            Ok(fence) => fence,
            Err(err) => {
                tracing::warn!(error = %err, "could not begin a leadership term; releasing the lock");
                lock.release().await;
                continue;
            }
        };
        let token = shutdown.child_token();
        tracing::info!(epoch = fence.epoch, holder = %holder, "became leader");
        crate::metrics::leader(true, fence.epoch);
        let _ = term_tx.send(Some(Term { fence, token: token.clone() }));

        let clean = hold(&mut lock, &shutdown).await;
        token.cancel();
        let _ = term_tx.send(None);
        crate::metrics::leader(false, fence.epoch);
        if clean {
            tracing::info!(epoch = fence.epoch, "leadership released");
        } else {
            tracing::warn!(epoch = fence.epoch, "leadership lost; leader work stopped");
        }
        lock.release().await;
    }
    Ok(())
}

/// Holds the lock until shutdown (`true`) or until it is lost or in doubt (`false`).
async fn hold(lock: &mut LeaderLock, shutdown: &CancellationToken) -> bool {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return true,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        match tokio::time::timeout(CHECK_EVERY, lock.held()).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return false,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "leader lock check failed");
                return false;
            }
            Err(_) => {
                tracing::warn!("leader lock check timed out");
                return false;
            }
        }
    }
}

/// Runs `work` for every term this scheduler leads, until shutdown.
pub async fn for_each_term<F, Fut>(mut term_rx: TermRx, shutdown: CancellationToken, mut work: F) -> anyhow::Result<()>
where
    F: FnMut(Term) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    loop {
        let term = loop {
            if let Some(term) = term_rx.borrow_and_update().clone() {
                break term;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                changed = term_rx.changed() => if changed.is_err() { return Ok(()) },
            }
        };
        work(term.clone()).await?;
        // Wait for this term to end before looking for the next.
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = term.token.cancelled() => {}
        }
    }
}
