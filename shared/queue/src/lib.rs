//! ax-queue
