//! Handlers that come with `ax worker`.

mod noop;
mod shell;

pub use noop::noop;
pub use shell::shell;
