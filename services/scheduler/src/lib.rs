//! ax-scheduler
