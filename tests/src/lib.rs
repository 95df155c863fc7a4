//! ax-tests
