//! One root cancellation token for the process: the first SIGINT or SIGTERM cancels
//! it so every component drains; a second one exits at once.

use tokio_util::sync::CancellationToken;

/// Cancels `root` on the first signal and exits the process on the second.
pub fn on_signals(root: CancellationToken) {
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down; a second signal exits at once");
        root.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal, exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
