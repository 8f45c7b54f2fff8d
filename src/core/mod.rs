//! Small primitives shared by every module: the allocator, backoff, outgoing TCP
//! connections, shutdown signals.

pub mod allocator;
pub mod backoff;
pub mod cow_map;
pub mod health_check;
pub mod net;
pub mod shutdown;
pub mod supervisor;
