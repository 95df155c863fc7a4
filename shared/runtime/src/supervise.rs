//! A service's components live and die together: they share one shutdown token,
//! and a component that stops on its own (an error or a panic) has left the service
//! half-working, so the others are told to drain rather than carry on without it.
//! Kept in one place so every service stops the same way.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Waits for every component in `components` to end, cancelling `shutdown` as soon
/// as one fails or panics. `service` names the service in the log ("monitor", ...).
pub async fn join_components(service: &str, mut components: JoinSet<anyhow::Result<()>>, shutdown: &CancellationToken) {
    while let Some(done) = components.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::error!(error = ?err, "{service} component failed; stopping the {service}");
                shutdown.cancel();
            }
            Err(err) => {
                tracing::error!(error = %err, "{service} component panicked; stopping the {service}");
                shutdown.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component that runs until `shutdown` is cancelled, like every real one.
    async fn until_cancelled(shutdown: CancellationToken) -> anyhow::Result<()> {
        shutdown.cancelled().await;
        Ok(())
    }

    #[tokio::test]
    async fn a_failing_component_stops_the_others() {
        let shutdown = CancellationToken::new();
        let mut components = JoinSet::new();
        components.spawn(until_cancelled(shutdown.child_token()));
        components.spawn(async { anyhow::bail!("broken") });
        join_components("test", components, &shutdown).await;
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn a_panicking_component_stops_the_others() {
        let shutdown = CancellationToken::new();
        let mut components = JoinSet::new();
        components.spawn(until_cancelled(shutdown.child_token()));
        components.spawn(async { panic!("broken") });
        join_components("test", components, &shutdown).await;
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn components_that_end_cleanly_leave_shutdown_alone() {
        let shutdown = CancellationToken::new();
        let mut components = JoinSet::new();
        components.spawn(async { Ok(()) });
        components.spawn(async { Ok(()) });
        join_components("test", components, &shutdown).await;
        assert!(!shutdown.is_cancelled());
    }
}
