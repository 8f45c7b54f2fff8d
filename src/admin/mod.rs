//! The admin server: readiness, health, and what configuration was received.
//!
//! It runs on the control runtime, reads the published snapshot like any other reader,
//! and never takes a lock the data path could wait on.

mod clusters;
mod config_dump;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::core::shutdown::Signal;
use crate::store::Store;

/// What the admin handlers read.
#[derive(Debug, Clone)]
pub struct AdminState {
    pub store: Arc<Store>,
    /// The bootstrap as read, in protobuf JSON, for `/config_dump`.
    pub bootstrap: Arc<serde_json::Value>,
    /// Triggered by `POST /quitquitquit`.
    pub quit: Arc<tokio::sync::Notify>,
}

/// Serves admin requests on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: Signal) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.clone().triggered() => return,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, request)) }
            });
            if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
}

fn handle(state: &AdminState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let snapshot = state.store.load();
    let query = request.uri().query().unwrap_or("");
    let json_format = query.split('&').any(|p| p == "format=json");
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/ready") => {
            if snapshot.ready {
                text(StatusCode::OK, "LIVE\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "PRE_INITIALIZING\n")
            }
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "OK\n"),
        (&Method::GET, "/config_dump") => json(&config_dump::dump(&snapshot, &state.bootstrap)),
        (&Method::GET, "/clusters") if json_format => json(&clusters::json(&snapshot)),
        (&Method::GET, "/clusters") => text(StatusCode::OK, clusters::text(&snapshot)),
        (&Method::POST, "/quitquitquit") => {
            state.quit.notify_one();
            text(StatusCode::OK, "OK\n")
        }
        (_, "/ready" | "/healthz" | "/config_dump" | "/clusters" | "/quitquitquit") => {
            text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.into())));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    response
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}
