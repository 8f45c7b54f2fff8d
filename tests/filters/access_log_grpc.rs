//! The gRPC access log service: a listener logs to an `AccessLogService` collector
//! running in this process, over a cluster of the bootstrap. The first message of the
//! stream names the log, every request arrives as an entry with Envoy's fields, and a
//! collector that is down costs the requests nothing (its entries are dropped and
//! counted).

use crate::common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::WAIT;
use common::backends;
use common::differential::{free_port, grpc_cluster, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;
use outrider::app;
use outrider::config::bootstrap::Bootstrap;
use outrider::pb::envoy::service::accesslog::v3::access_log_service_server::{
    AccessLogService, AccessLogServiceServer,
};
use outrider::pb::envoy::service::accesslog::v3::stream_access_logs_message::LogEntries;
use outrider::pb::envoy::service::accesslog::v3::{StreamAccessLogsMessage, StreamAccessLogsResponse};
use tokio::sync::watch;

/// Every message the collector received, in order.
#[derive(Clone)]
struct Collector {
    messages: Arc<Mutex<Vec<StreamAccessLogsMessage>>>,
    count: watch::Sender<usize>,
}

#[tonic::async_trait]
impl AccessLogService for Collector {
    async fn stream_access_logs(
        &self,
        request: tonic::Request<tonic::Streaming<StreamAccessLogsMessage>>,
    ) -> Result<tonic::Response<StreamAccessLogsResponse>, tonic::Status> {
        let mut stream = request.into_inner();
        while let Some(message) = stream.message().await? {
            let entries = match &message.log_entries {
                Some(LogEntries::HttpLogs(logs)) => logs.log_entry.len(),
                _ => 0,
            };
            self.messages.lock().unwrap().push(message);
            self.count.send_modify(|c| *c += entries);
        }
        Ok(tonic::Response::new(StreamAccessLogsResponse {}))
    }
}

async fn collector() -> (u16, Collector) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let collector = Collector { messages: Arc::default(), count: watch::channel(0).0 };
    let service = AccessLogServiceServer::new(collector.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (port, collector)
}

fn bootstrap(port: u16, backend: u16, collector: u16) -> String {
    let clusters = [static_cluster("backend", backend), grpc_cluster("als", collector)].concat();
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          access_log:
          - name: envoy.access_loggers.http_grpc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig
              common_config:
                log_name: mesh-http
                transport_api_version: V3
                grpc_service: {{ envoy_grpc: {{ cluster_name: als }} }}
                buffer_flush_interval: 0.1s
              additional_request_headers_to_log: [x-tenant]
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - name: ok
                match: {{ prefix: "/ok" }}
                route: {{ cluster: backend }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{clusters}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
"#
    )
}

#[tokio::test]
async fn entries_reach_the_collector_with_the_log_name_first() {
    let backend = backends::http(|_| async { Response::new(Full::new(Bytes::from_static(b"hi"))) }).await;
    let (collector_port, collector) = collector().await;
    let port = free_port();
    let outrider =
        app::start_with(Bootstrap::parse(&bootstrap(port, backend.port, collector_port)).unwrap(), 1).await.unwrap();
    outrider.listeners_ready().await;
    let requests = [
        "GET /ok/a HTTP/1.1\r\nhost: svc\r\nx-tenant: blue\r\nconnection: close\r\n\r\n",
        "GET /none HTTP/1.1\r\nhost: svc\r\nconnection: close\r\n\r\n",
        "GET /ok/b HTTP/1.1\r\nhost: svc\r\nuser-agent: t/1\r\nconnection: close\r\n\r\n",
    ];
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(raw_http1(port, request).await.0);
    }
    assert_eq!(statuses, [200, 404, 200]);
    let mut count = collector.count.subscribe();
    tokio::time::timeout(WAIT, count.wait_for(|c| *c >= 3)).await.expect("entries in time").unwrap();
    let messages = collector.messages.lock().unwrap().clone();
    let identifier = messages[0].identifier.as_ref().expect("the first message names the log");
    assert_eq!(identifier.log_name, "mesh-http");
    assert!(messages[1..].iter().all(|m| m.identifier.is_none()), "one stream: {messages:?}");
    let entries: Vec<_> = messages
        .iter()
        .flat_map(|m| match &m.log_entries {
            Some(LogEntries::HttpLogs(logs)) => logs.log_entry.clone(),
            _ => Vec::new(),
        })
        .collect();
    let summary: Vec<(String, u32, String)> = entries
        .iter()
        .map(|e| {
            let request = e.request.clone().unwrap();
            let response = e.response.clone().unwrap();
            (request.path, response.response_code.unwrap().value, response.response_code_details)
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("/ok/a".to_owned(), 200, "via_upstream".to_owned()),
            ("/none".to_owned(), 404, "route_not_found".to_owned()),
            ("/ok/b".to_owned(), 200, "via_upstream".to_owned()),
        ]
    );
    let first = &entries[0];
    assert_eq!(first.request.as_ref().unwrap().request_headers.get("x-tenant").map(String::as_str), Some("blue"));
    assert_eq!(first.common_properties.as_ref().unwrap().upstream_cluster, "backend");
    assert!(entries[1].common_properties.as_ref().unwrap().response_flags.as_ref().unwrap().no_route_found);
    assert_eq!(entries[2].request.as_ref().unwrap().user_agent, "t/1");
}

#[tokio::test]
async fn a_collector_that_is_down_costs_requests_nothing() {
    let backend = backends::http(|_| async { Response::new(Full::new(Bytes::from_static(b"hi"))) }).await;
    let port = free_port();
    // Nothing listens on the collector's port.
    let dead = free_port();
    let outrider = app::start_with(Bootstrap::parse(&bootstrap(port, backend.port, dead)).unwrap(), 1).await.unwrap();
    outrider.listeners_ready().await;
    for _ in 0..3 {
        let (status, _, body) = raw_http1(port, "GET /ok HTTP/1.1\r\nhost: svc\r\nconnection: close\r\n\r\n").await;
        assert_eq!((status, body.as_str()), (200, "hi"));
    }
}
