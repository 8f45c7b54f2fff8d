//! A large upload streams through the proxy with bounded memory: 1 GiB goes through an
//! Outrider process whose peak resident memory stays far below that.

use std::convert::Infallible;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

use crate::common::lab::free_port;
use crate::common::wait;

const UPLOAD: usize = 1024 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A backend that counts the bytes of each request body and answers with the count.
async fn counting_backend(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                let mut body = request.into_body();
                let mut total = 0usize;
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.unwrap().into_data() {
                        total += data.len();
                    }
                }
                Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from(total.to_string()))))
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
}

#[tokio::test]
async fn a_large_upload_streams_with_bounded_memory() {
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    tokio::spawn(counting_backend(backend));
    let proxy_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bootstrap.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:
  - name: ingress
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {proxy_port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: sink, timeout: 0s }} }}] }}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: sink
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: sink
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend_port} }} }} }} }}] }}]
"#
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["run", "--concurrency", "1", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proxy = Proxy(child);

    // The worker binds shortly after start: connect until it accepts (bounded).
    let stream = wait::connect(proxy_port).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let chunks = futures::stream::iter(
        (0..UPLOAD / CHUNK).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![7u8; CHUNK])))),
    );
    let request = http::Request::post("/upload").header("host", "sink").body(StreamBody::new(chunks)).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(300), sender.send_request(request)).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(String::from_utf8_lossy(&body), UPLOAD.to_string(), "every byte reached the backend");

    let peak = peak_rss_kib(proxy.0.id());
    println!("peak RSS {peak} KiB");
    assert!(peak < 128 * 1024, "peak RSS {peak} KiB while {} MiB streamed through", UPLOAD >> 20);
}
