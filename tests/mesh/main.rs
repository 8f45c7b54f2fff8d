//! The mesh around the sidecar: mutual TLS, Istio (istiod, istio-agent, telemetry), go-control-
//! plane, traffic capture and injection.
//!
//! One test binary for this group of tests: each file is a module, linked once with
//! the library instead of once per file. The support modules are shared by every group.
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../netns/mod.rs"]
mod netns;
#[path = "../tls_support/mod.rs"]
mod tls_support;

mod agent_ca;
mod agent_istiod;
mod agent_status;
mod capture_netns;
mod dns_reference;
mod edge_corpus;
mod inject;
mod interop_go_control_plane;
mod istio;
mod istio_agent;
mod istio_stats;
mod istiod_adaptive;
mod istiod_file_mode;
mod istiod_hbone;
mod istiod_telemetry;
mod k8s_manifests;
mod kubernetes;
mod load_report;
mod tls_inbound;
mod tls_mesh;
mod tls_rotation;
mod waypoint;
mod waypoint_telemetry;
mod workload_discovery;
mod ztunnel_hbone;
