//! The task definition (seed 3.1): what to run, when, where, and how to recover.
//!
//! Definitions arrive as JSON. [`TaskDefinition::from_json`] parses and validates in
//! one step and reports the first problem with the dotted path of the field at fault,
//! so an API client or the CLI can point at it.

mod definition;
mod schema;
mod validate;

pub use definition::*;
pub use schema::TASK_SCHEMA_JSON;
pub use validate::{is_valid_task_name, FieldError, WorkerVersion};
