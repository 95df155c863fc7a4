//! Alerting's records: rules and channels (definitions kept as canonical JSON), the
//! alerts themselves with their history and acknowledgement, and the webhook
//! deliveries decided with them.

mod definitions;
mod notifications;
mod records;

pub use definitions::{Put, Stored};
pub use notifications::{NewNotification, NotificationKind, NotificationRow};
pub(crate) use notifications::insert_notifications;
pub use records::{AlertFilter, AlertRecord, AlertStatus, FireOutcome, Firing};
