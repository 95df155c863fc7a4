use std::sync::Arc;

use crate::context::{handler_fn, Handler, TaskContext};

/// Succeeds at once; for demos, tests and measuring AX itself.
pub fn noop() -> Arc<dyn Handler> {
    handler_fn(|_ctx: TaskContext| async { Ok(None) })
}
