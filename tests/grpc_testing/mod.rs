//! The few `grpc.testing` messages (gRPC's interop `messages.proto`) the ORCA interop test
//! sends to grpc-go's interop server, declared by hand with their wire tag numbers, and
//! the server itself as a child process.
//!
//! Only the fields the test sets are declared: prost skips the others on decode, and the
//! server reads absent fields as their defaults (payload type `COMPRESSABLE` = 0, size 0).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// `TestService/UnaryCall`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SimpleRequest {
    #[prost(int32, tag = "2")]
    pub response_size: i32,
    /// Sent back by the server as this call's `endpoint-load-metrics-bin` trailer.
    #[prost(message, optional, tag = "11")]
    pub orca_per_query_report: Option<TestOrcaReport>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SimpleResponse {}

/// The metrics the server reports. It has no request rate: the server sets utilizations
/// and costs, never `rps_fractional`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TestOrcaReport {
    #[prost(double, tag = "1")]
    pub cpu_utilization: f64,
    #[prost(double, tag = "2")]
    pub memory_utilization: f64,
    #[prost(map = "string, double", tag = "3")]
    pub request_cost: HashMap<String, f64>,
    #[prost(map = "string, double", tag = "4")]
    pub utilization: HashMap<String, f64>,
}

/// `TestService/FullDuplexCall`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingOutputCallRequest {
    /// One response message per entry.
    #[prost(message, repeated, tag = "2")]
    pub response_parameters: Vec<ResponseParameters>,
    /// Stored in the server's metrics recorder, which its ORCA service streams.
    #[prost(message, optional, tag = "8")]
    pub orca_oob_report: Option<TestOrcaReport>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseParameters {
    #[prost(int32, tag = "1")]
    pub size: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingOutputCallResponse {}

pub const UNARY_CALL: &str = "/grpc.testing.TestService/UnaryCall";
pub const FULL_DUPLEX_CALL: &str = "/grpc.testing.TestService/FullDuplexCall";

/// A gRPC client of `127.0.0.1:port` (h2c), for calls without generated stubs.
pub async fn client(port: u16) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(crate::common::WAIT)
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

/// One unary call; fails the test on any gRPC error.
pub async fn unary<Req, Resp>(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    path: &'static str,
    request: Req,
) -> Resp
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let call = grpc.unary(tonic::Request::new(request), http::uri::PathAndQuery::from_static(path), codec);
    tokio::time::timeout(crate::common::WAIT, call).await.unwrap().unwrap().into_inner()
}

/// Sets the server's out-of-band metrics the way grpc-go's `DoORCAOOBTest` does: a
/// `FullDuplexCall` message carrying `orca_oob_report`. The server stores the report
/// before it answers, so once the answer is read the ORCA service streams it.
pub async fn set_oob_report(port: u16, report: TestOrcaReport) {
    let mut grpc = client(port).await;
    grpc.ready().await.unwrap();
    let message = StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters { size: 0 }],
        orca_oob_report: Some(report),
    };
    let codec = tonic_prost::ProstCodec::<StreamingOutputCallRequest, StreamingOutputCallResponse>::default();
    let call = grpc.streaming(
        tonic::Request::new(futures::stream::iter([message])),
        http::uri::PathAndQuery::from_static(FULL_DUPLEX_CALL),
        codec,
    );
    let mut answers = tokio::time::timeout(crate::common::WAIT, call).await.unwrap().unwrap().into_inner();
    let answer = tokio::time::timeout(crate::common::WAIT, answers.message()).await.unwrap().unwrap();
    assert!(answer.is_some(), "FullDuplexCall answered the message that set the OOB report");
}

/// grpc-go's interop server (`interop/server`) on `port`, killed when dropped.
pub struct InteropServer {
    _child: Child,
    pub port: u16,
}

impl InteropServer {
    /// Starts the server and waits until it accepts connections (bounded).
    pub async fn start(binary: &Path) -> InteropServer {
        Self::start_with(binary, &[]).await
    }

    /// Starts a grpc-go server taking `--port=N` (the interop server, grpc-orca-backend)
    /// with `args` besides.
    pub async fn start_with(binary: &Path, args: &[&str]) -> InteropServer {
        let port = crate::common::lab::free_port();
        let mut child = Command::new(binary)
            .arg(format!("--port={port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Polled: the server is a separate process.
        crate::common::wait::until(&format!("the interop server to listen on {port}"), async || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("interop server exited: {status}");
            }
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()
        })
        .await;
        InteropServer { _child: child, port }
    }
}
