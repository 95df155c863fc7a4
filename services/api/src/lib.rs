//! ax-api
