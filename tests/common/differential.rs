//! Differential runs: the same bootstrap (static listeners and clusters, Envoy's format)
//! starts a real Envoy 1.40 and Outrider side by side, each on its own listener port, so a
//! test sends the same requests to both and compares what comes back.
//!
//! Envoy is found through `$OUTRIDER_ENVOY`, `PATH` or `bench/.envoy/bin/envoy`
//! (`bench/install-envoy.sh` installs it). Without it, [`Pair::start`] still starts
//! Outrider and prints `SKIPPED: … envoy not found` for the Envoy half; a test that only
//! makes sense side by side checks [`Pair::envoy`] and says SKIPPED itself.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use outrider::app::{self, Running};
use outrider::config::bootstrap::Bootstrap;
use tokio::process::{Child, Command};

use super::WAIT;
use super::skip::{Tool, skipped};
use super::wait;

/// The Envoy binary, if one is installed.
pub fn envoy_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("OUTRIDER_ENVOY") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("envoy")).find(|p| p.is_file()));
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/.envoy/bin/envoy");
    on_path.or_else(|| bundled.is_file().then_some(bundled))
}

pub use super::lab::free_port;

/// A `STATIC` cluster `name` with one loopback endpoint on `port`, as an item of the
/// bootstrap's `  clusters:` list (starts with a newline, no trailing one).
pub fn static_cluster(name: &str, port: u16) -> String {
    cluster_with(name, port, "")
}

/// [`static_cluster`] speaking HTTP/2 to its endpoint: a gRPC service (ext_authz, rate
/// limit, access log service, xDS).
pub fn grpc_cluster(name: &str, port: u16) -> String {
    http2_cluster(name, port)
}

/// [`static_cluster`] speaking HTTP/2 to its endpoint (a tunnel's `CONNECT`).
pub fn http2_cluster(name: &str, port: u16) -> String {
    cluster_with(name, port, HTTP2)
}

/// A `STATIC` cluster `name` whose one endpoint is this proxy's internal listener
/// `listener` (`envoy_internal_address`).
pub fn internal_cluster(name: &str, listener: &str) -> String {
    cluster_at(name, &format!("{{ envoy_internal_address: {{ server_listener_name: {listener} }} }}"), "")
}

/// The bootstrap block Envoy needs before it serves internal listeners (a top-level key,
/// ending with a newline).
pub const INTERNAL_LISTENER_EXTENSION: &str = r#"bootstrap_extensions:
- name: envoy.bootstrap.internal_listener
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener
"#;

/// Where [`tcp_proxy_listener`] is: on 127.0.0.1:`port`.
pub fn on_loopback(port: u16) -> String {
    format!("\n    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}")
}

/// Where [`tcp_proxy_listener`] is: an internal listener.
pub const INTERNAL: &str = "\n    internal_listener: {}";

/// One item of a bootstrap's `static_resources.listeners`: the listener `name` at `place`
/// ([`on_loopback`] or [`INTERNAL`]) whose TCP proxy sends every connection to `cluster`;
/// `extra` is more of the TCP proxy's fields, each line a newline and 10 spaces deep.
pub fn tcp_proxy_listener(name: &str, place: &str, cluster: &str, extra: &str) -> String {
    format!(
        r#"
  - name: {name}{place}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: {name}
          cluster: {cluster}{extra}"#
    )
}

/// [`grpc_cluster`] whose endpoint is a Unix socket (`pipe`), as Istio's agent serves xDS
/// and SDS.
pub fn grpc_pipe_cluster(name: &str, path: &std::path::Path) -> String {
    let address = format!("{{ pipe: {{ path: \"{}\" }} }}", path.display());
    cluster_at(name, &address, HTTP2)
}

/// Cluster options for HTTP/2 to the endpoint.
const HTTP2: &str = r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }"#;

fn cluster_with(name: &str, port: u16, options: &str) -> String {
    cluster_at(name, &format!("{{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}"), options)
}

fn cluster_at(name: &str, address: &str, options: &str) -> String {
    format!(
        r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s{options}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {address} }}"#
    )
}

/// The router's type URL, for connection managers written in tests.
pub const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// A virtual host body for [`http_listener`]: every request to the `backend` cluster.
pub const ROUTE_TO_BACKEND: &str =
    "              routes:\n              - match: { prefix: / }\n                route: { cluster: backend }\n";

/// Where [`http_listener`] puts what a test adds.
#[derive(Default)]
pub struct HttpListenerExtra<'a> {
    /// Listener fields, each line a newline and 4 spaces deep.
    pub listener: &'a str,
    /// Connection manager fields, each line a newline and 10 spaces deep.
    pub hcm: &'a str,
}

/// One item of a bootstrap's `static_resources.listeners`: the listener `name` on
/// 127.0.0.1:`port` with a connection manager (`stat_prefix`, the router only, one virtual
/// host `v` for every domain); `virtual_host` is the rest of that virtual host, its `routes`
/// among it, each line 14 spaces deep.
pub fn http_listener(name: &str, port: u16, stat_prefix: &str, extra: HttpListenerExtra, virtual_host: &str) -> String {
    let HttpListenerExtra { listener, hcm } = extra;
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}{listener}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {stat_prefix}{hcm}
          http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ "@type": {ROUTER} }} }}]
          route_config:
            virtual_hosts:
            - name: v
              domains: ["*"]
{virtual_host}"#
    )
}

/// A running Envoy, killed when dropped.
pub struct Envoy {
    child: Child,
    pub admin: std::net::SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with `bootstrap` (YAML) and waits until its admin server says LIVE.
    pub async fn start(binary: &Path, bootstrap: &str) -> Envoy {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bootstrap.yaml");
        std::fs::write(&config, bootstrap).unwrap();
        let log = dir.path().join("envoy.log");
        let admin_file = dir.path().join("admin-address");
        let mut child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--use-dynamic-base-id", "--disable-hot-restart", "--concurrency", "1", "--log-level", "info"])
            .arg("--log-path")
            .arg(&log)
            .arg("--admin-address-path")
            .arg(&admin_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Polled: Envoy is a separate process. First its admin address file, then LIVE.
        let admin = wait::within(async || {
            if let Ok(text) = std::fs::read_to_string(&admin_file)
                && let Ok(address) = text.trim().parse()
            {
                return Some(address);
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("envoy exited ({status}):\n{}", tail(&log));
            }
            None
        })
        .await
        .unwrap_or_else(|| panic!("envoy did not start:\n{}", tail(&log)));
        let mut envoy = Envoy { child, admin, log, _dir: dir };
        let live = wait::within(async || {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!("envoy exited ({status}):\n{}", envoy.log_tail());
            }
            let (status, body) = super::admin_get(envoy.admin, "/ready").await;
            (status == 200 && body.contains("LIVE")).then_some(())
        })
        .await;
        assert!(live.is_some(), "envoy not ready:\n{}", envoy.log_tail());
        envoy
    }

    /// The last lines of Envoy's log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// One counter or gauge from Envoy's `/stats` (0 when absent).
    pub async fn stat(&self, name: &str) -> u64 {
        let (_, body) = super::admin_get(self.admin, &format!("/stats?filter=^{}$", regex_escape(name))).await;
        stat_value(&body, name)
    }

    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }
}

fn regex_escape(name: &str) -> String {
    name.replace('.', "\\.")
}

/// The value of `name` in a `/stats` text body.
pub fn stat_value(body: &str, name: &str) -> u64 {
    body.lines()
        .filter_map(|line| line.split_once(": "))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn tail(log: &Path) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<_> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Envoy and Outrider started from the same bootstrap.
pub struct Pair {
    /// `None` when no Envoy is installed.
    pub envoy: Option<Envoy>,
    /// Envoy's listener port (meaningless without Envoy).
    pub envoy_port: u16,
    pub outrider: Running,
    pub outrider_port: u16,
}

impl Pair {
    /// `bootstrap(port)` writes the bootstrap with the listener on `port` (call it with
    /// each proxy's port; anything else must be the same for both). Both proxies get an
    /// admin server on a port of their own (`admin` is added when missing).
    pub async fn start(bootstrap: impl Fn(u16) -> String) -> Pair {
        let (envoy_port, outrider_port) = (free_port(), free_port());
        let with_admin = |port: u16| {
            let text = bootstrap(port);
            if text.contains("\nadmin:") || text.starts_with("admin:") {
                text
            } else {
                format!("{text}\nadmin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}\n")
            }
        };
        let envoy = match envoy_binary() {
            Some(binary) => Some(Envoy::start(&binary, &with_admin(envoy_port)).await),
            None => {
                skipped(Tool::Envoy, "the Envoy half of this differential test", "envoy not found");
                None
            }
        };
        let outrider = app::start_with(Bootstrap::parse(&with_admin(outrider_port)).unwrap(), 1).await.unwrap();
        outrider.listeners_ready().await;
        Pair { envoy, envoy_port, outrider, outrider_port }
    }

    /// The listener ports to compare: Envoy's first (when running), then Outrider's.
    pub fn ports(&self) -> Vec<(&'static str, u16)> {
        let mut ports = Vec::new();
        if self.envoy.is_some() {
            ports.push(("envoy", self.envoy_port));
        }
        ports.push(("outrider", self.outrider_port));
        ports
    }

    /// One stat of Outrider's, by its flat name (0 when absent).
    pub async fn outrider_stat(&self, name: &str) -> u64 {
        let (_, body) = super::admin_get(self.outrider.admin_address, "/stats").await;
        stat_value(&body, name)
    }
}

/// A raw HTTP/1.1 exchange: sends `request` (the whole text) on a new connection to
/// `port` and returns (status, headers lower-cased, body). For requests a client library
/// would refuse to send (odd paths, upgrades).
pub async fn raw_http1(port: u16, request: &str) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut response)).await;
    parse_response(&String::from_utf8_lossy(&response))
}

/// Splits an HTTP/1.1 response's text into (status, headers, body).
pub fn parse_response(text: &str) -> (u16, Vec<(String, String)>, String) {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}
