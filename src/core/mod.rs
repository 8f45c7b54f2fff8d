//! Small primitives shared by every module: the allocator, backoff, shutdown signals.

pub mod allocator;
pub mod backoff;
pub mod shutdown;
