//! Handlers that come with `ax worker`.

mod http;
mod noop;
mod shell;

pub use http::http;
pub use noop::noop;
pub use shell::shell;
