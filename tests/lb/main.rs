//! Load balancing: every policy's picks, hashing, load-aware weights and ORCA.
//!
//! One test binary for this group of tests: each file is a module, linked once with
//! the library instead of once per file. The support modules are shared by every group.
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../grpc_testing/mod.rs"]
mod grpc_testing;

mod interop_orca;
mod lb_core;
mod lb_hash;
mod lb_hash_bounded;
mod lb_load_aware;
mod lb_subset;
mod orca_oob_app;
