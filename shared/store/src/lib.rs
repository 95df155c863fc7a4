//! ax-store
