//! Small primitives shared by every module: backoff, shutdown signals.

pub mod backoff;
pub mod shutdown;
