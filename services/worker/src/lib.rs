//! ax-worker
