//! go-control-plane's integration check (v0.14.0, `make integration.*`) with Outrider as the
//! proxy: its test server (`pkg/test/main`) is the ADS server, pushes `--u` snapshots (new
//! cluster names, endpoints and listeners each time) and after each one requests every
//! listener port until a batch of requests all get the upstream's message back; it exits
//! 0 when every snapshot passed. Outrider runs as `outrider run -c bootstrap.yaml`, the
//! bootstrap being the shape of go-control-plane's `sample/bootstrap-ads.yaml` and
//! `bootstrap-delta-ads.yaml` (ADS over gRPC to `xds_cluster`, `als_cluster` for the
//! access log service), and the flags are `scripts/integration.sh`'s: `--runtimes` 2 for
//! SotW ADS and 1 otherwise, `-debug`, `-message`.
//!
//! Runs: ADS SotW, ADS Delta, ADS SotW with `--mux` (endpoints from a separate linear
//! cache), and both ADS modes with `--tls` (listeners terminate TLS with certificates and a
//! validation context delivered by SDS over ADS).
//!
//! HTTP listeners are included (routes over RDS; each connection manager logs to the
//! server's gRPC access log service on `als_cluster`).
//!
//! Trimmed, and why:
//! - Scoped-route HTTP listeners (`--scopedhttp=0`): Outrider has no SRDS
//!   (`….typed_config.scoped_routes: scoped routes is not supported`).
//! - The `xds`, `delta` and `rest` modes (`integration.xds`, `.xds.delta`, `.xds.mux`,
//!   `.rest`): Outrider's dynamic resources come over ADS only. VHDS listeners, generated
//!   only in `delta` mode, are therefore not reached either.
//! - `--mux` with Delta ADS: the test server itself cannot (its mux cache classifies only
//!   SotW requests and crashes on a delta one); upstream runs `-mux` with SotW only.
//!
//! Left as they are: the RTDS layers and extension configs the server adds to each
//! snapshot are never asked for, by Envoy or Outrider, since the bootstrap has neither a
//! runtime layer nor a filter that discovers its config.
//!
//! Bounded: three snapshots, ten request batches 200 ms apart each (the server's own
//! pace; it passes a snapshot on its first all-good batch but always sends all ten), and
//! the whole run under [`RUN_BOUND`]. The server's client gives each request 100 ms.

use crate::common;

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::lab::free_port;
use tokio::process::{Child, Command};

/// What the upstream answers and the server expects back (integration.sh's `MESSAGE`).
const MESSAGE: &str = "Hi, there!\n";
/// Listeners per snapshot: the server's default numbers of HTTP and TCP listeners.
const HTTP_LISTENERS: u16 = 2;
const TCP_LISTENERS: u16 = 2;
/// Bounds a failing run (a passing one takes a few seconds): the server waits up to a
/// minute for Outrider's first request, then paces itself.
const RUN_BOUND: Duration = Duration::from_secs(120);

/// The loopback ports of one run.
struct Ports {
    xds: u16,
    gateway: u16,
    als: u16,
    upstream: u16,
    /// The listeners take `base`, `base + 1`, …
    base: u16,
}

/// `n` consecutive free loopback ports, the first returned. Bounded retries: a port in the
/// range may be taken by another test between two attempts.
fn free_range(n: u16) -> u16 {
    for _ in 0..100 {
        let first = free_port();
        let Some(last) = first.checked_add(n - 1) else { continue };
        let held: Vec<_> = (first..=last).map(|p| std::net::TcpListener::bind(("127.0.0.1", p))).collect();
        if held.iter().all(Result::is_ok) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// Outrider's bootstrap: go-control-plane's sample ADS bootstrap on this run's ports.
fn bootstrap(api_type: &str, ports: &Ports) -> String {
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {{ cluster_name: xds_cluster }}
    set_node_on_first_message_only: true
  cds_config: {{ resource_api_version: V3, ads: {{}} }}
  lds_config: {{ resource_api_version: V3, ads: {{}} }}
node: {{ cluster: test-cluster, id: test-id }}
static_resources:
  clusters:
  - name: xds_cluster
    connect_timeout: 1s
    http2_protocol_options: {{}}
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {xds} }} }} }}
  - name: als_cluster
    connect_timeout: 1s
    http2_protocol_options: {{}}
    load_assignment:
      cluster_name: als_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {als} }} }} }}
"#,
        xds = ports.xds,
        als = ports.als,
    )
}

/// A child process whose output goes to a file, killed when dropped.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(command: &mut Command, log: PathBuf) -> Process {
        let out = std::fs::File::create(&log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Process { child, log }
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// One `make integration.*` run: the test server in `mode` with `flags`, Outrider against
/// it over `api_type`. Passes when the server exits 0.
async fn integration(test: &str, mode: &str, api_type: &str, flags: &[&str]) {
    let Some(server) = common::peers::peer("go-control-plane-test-server", test) else {
        return;
    };
    let upstream = common::backends::healthy(MESSAGE).await;
    let ports = Ports {
        xds: free_port(),
        gateway: free_port(),
        als: free_port(),
        upstream: upstream.port,
        base: free_range(HTTP_LISTENERS + TCP_LISTENERS),
    };
    let dir = tempfile::tempdir().unwrap();
    let runtimes = if mode == "ads" { "--runtimes=2" } else { "--runtimes=1" };
    let mut control_plane = Process::spawn(
        Command::new(&server)
            .args([&format!("--xds={mode}"), runtimes, "-debug", &format!("-message={MESSAGE}")])
            .args([
                format!("--port={}", ports.xds),
                format!("--gateway={}", ports.gateway),
                format!("--als={}", ports.als),
                format!("--upstream={}", ports.upstream),
                format!("--base={}", ports.base),
            ])
            .args([&format!("--http={HTTP_LISTENERS}"), "--scopedhttp=0", &format!("--tcp={TCP_LISTENERS}")])
            .args(["-u=3", "-r=10", "--delay=200ms"])
            .args(flags),
        dir.path().join("test-server.log"),
    );
    let config = dir.path().join("bootstrap.yaml");
    std::fs::write(&config, bootstrap(api_type, &ports)).unwrap();
    let outrider = Process::spawn(
        Command::new(env!("CARGO_BIN_EXE_outrider")).arg("run").arg("-c").arg(&config).args([
            "--drain-time-s",
            "1",
            "--concurrency",
            "1",
        ]),
        dir.path().join("outrider.log"),
    );

    let status: ExitStatus = tokio::time::timeout(RUN_BOUND, control_plane.child.wait())
        .await
        .unwrap_or_else(|_| panic!("test server still running after {RUN_BOUND:?}:\n{}", control_plane.tail()))
        .unwrap();
    assert!(
        status.success(),
        "go-control-plane's check failed ({status}):\n--- test server\n{}\n--- outrider\n{}",
        control_plane.tail(),
        outrider.tail()
    );
    assert!(std::fs::read_to_string(&control_plane.log).unwrap().contains(&format!("Test for {mode} passed!")));
}

#[tokio::test]
async fn ads_sotw() {
    integration("interop_go_control_plane ads_sotw", "ads", "GRPC", &[]).await;
}

#[tokio::test]
async fn ads_delta() {
    integration("interop_go_control_plane ads_delta", "delta-ads", "DELTA_GRPC", &[]).await;
}

#[tokio::test]
async fn ads_sotw_mux() {
    integration("interop_go_control_plane ads_sotw_mux", "ads", "GRPC", &["--mux"]).await;
}

#[tokio::test]
async fn ads_sotw_tls() {
    integration("interop_go_control_plane ads_sotw_tls", "ads", "GRPC", &["--tls"]).await;
}

#[tokio::test]
async fn ads_delta_tls() {
    integration("interop_go_control_plane ads_delta_tls", "delta-ads", "DELTA_GRPC", &["--tls"]).await;
}
