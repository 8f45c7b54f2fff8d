//! Loopback backends that misbehave on purpose, for the fault and circuit-breaker tests:
//! one that holds every request until the test releases it, one that dies midway through
//! a response, one that never answers, and an HTTP/2 one that resets every stream. Each
//! counts what it saw, so tests wait on counts instead of time. They run as tasks of the
//! test's runtime and end with it.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What a backend has seen.
#[derive(Debug, Default)]
pub struct Seen {
    pub connections: AtomicUsize,
    pub requests: AtomicUsize,
}

impl Seen {
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A backend's port and counts.
#[derive(Debug, Clone)]
pub struct Backend {
    pub port: u16,
    pub seen: Arc<Seen>,
}

async fn bind() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// An HTTP/1.1 and HTTP/2 server answering each request with `handler`.
pub async fn http<F, Fut>(handler: F) -> Backend
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let (listener, port) = bind().await;
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let (handler, counts) = (handler.clone(), counts.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    counts.requests.fetch_add(1, Ordering::SeqCst);
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(request).await) }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Backend { port, seen }
}

/// A backend answering 200 with `name` as the body.
pub async fn healthy(name: &'static str) -> Backend {
    http(move |_| async move { Response::new(Full::new(Bytes::from_static(name.as_bytes()))) }).await
}

/// A backend that holds every request until the test releases it ([`Held::release`]).
pub struct Held {
    pub backend: Backend,
    gate: Arc<Semaphore>,
}

impl Held {
    /// Lets `n` held requests (present or future) be answered.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }
}

pub async fn held() -> Held {
    let gate = Arc::new(Semaphore::new(0));
    let waiting = gate.clone();
    let backend = http(move |_| {
        let gate = waiting.clone();
        async move {
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            Response::new(Full::new(Bytes::from_static(b"held")))
        }
    })
    .await;
    Held { backend, gate }
}

/// A backend that sends the response head and 10 of the 100 body bytes it announced,
/// then closes the connection: it died mid-response.
pub async fn truncating() -> Backend {
    let (listener, port) = bind().await;
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                counts.requests.fetch_add(1, Ordering::SeqCst);
                let response = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789";
                let _ = stream.write_all(response).await;
                let _ = stream.flush().await;
                // Dropping the stream closes the connection, 90 bytes short.
            });
        }
    });
    Backend { port, seen }
}

/// A backend that accepts connections, reads what comes, and never answers.
pub async fn silent() -> Backend {
    let (listener, port) = bind().await;
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let mut counted = false;
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) if !counted => {
                            counted = true;
                            counts.requests.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    Backend { port, seen }
}

/// An HTTP/2 backend (h2 directly, to control the frames) that answers every stream with
/// `RST_STREAM` carrying `reason`.
pub async fn resetting_h2(reason: h2::Reason) -> Backend {
    let (listener, port) = bind().await;
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else { return };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    counts.requests.fetch_add(1, Ordering::SeqCst);
                    respond.send_reset(reason);
                }
            });
        }
    });
    Backend { port, seen }
}
