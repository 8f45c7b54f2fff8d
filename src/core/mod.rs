//! Small primitives shared by every module: the allocator, backoff, fast hash maps, outgoing TCP
//! connections, shutdown signals, the limits of the process's own HTTP servers.

pub mod allocator;
pub mod backoff;
pub mod control_server;
pub mod cow_map;
pub mod cpu_usage;
pub mod hash;
pub mod net;
pub mod server_fail_flag;
pub mod shutdown;
pub mod supervisor;
