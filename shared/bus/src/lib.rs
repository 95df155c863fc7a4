//! ax-bus
