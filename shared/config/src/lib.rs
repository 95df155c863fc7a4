//! ax-config
