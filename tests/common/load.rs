//! Load for the fault tests: clients sending requests through the proxy (some on a new
//! connection each, some keeping theirs), counting what was sent, succeeded and failed,
//! bounded in count rather than in time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::WAIT;
use super::lab::{Answer, get};
use super::wait;

/// A client that keeps its HTTP/1.1 connection to the proxy across requests, as pooling
/// clients do: a connection found closed before the request was written is replaced
/// (nothing was sent, so that is no retry); any other error is the request's failure.
#[derive(Default)]
pub struct KeepAlive {
    sender: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    /// Connections opened so far.
    pub connections: u64,
}

impl KeepAlive {
    pub async fn get(&mut self, port: u16, path: &str) -> Result<Answer, String> {
        let mut request = http::Request::get(path).header("host", "example.com").body(Full::new(Bytes::new())).unwrap();
        // Bounded: a fresh connection that cannot take the request is a failure.
        for _ in 0..3 {
            let sender = match self.sender.as_mut() {
                Some(sender) if !sender.is_closed() => sender,
                _ => {
                    let stream =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
                    let (sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
                    tokio::spawn(connection);
                    self.connections += 1;
                    self.sender.insert(sender)
                }
            };
            if sender.ready().await.is_err() {
                self.sender = None;
                continue;
            }
            let sent = tokio::time::timeout(WAIT, sender.try_send_request(request)).await;
            let response = match sent {
                Err(_) => return Err("no response head in time".to_owned()),
                Ok(Ok(response)) => response,
                Ok(Err(mut error)) => match error.take_message() {
                    Some(unsent) => {
                        self.sender = None;
                        request = unsent;
                        continue;
                    }
                    None => return Err(error.into_error().to_string()),
                },
            };
            let (parts, body) = response.into_parts();
            let body = match tokio::time::timeout(WAIT, body.collect()).await {
                Ok(Ok(collected)) => Ok(collected.to_bytes()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err("body not ended in time".to_owned()),
            };
            return Ok(Answer { status: parts.status, headers: parts.headers, body });
        }
        Err("no connection could take the request".to_owned())
    }
}

/// How many requests a fault test sends: `OUTRIDER_FAULT_REQUESTS`, else `default`
/// (small, for CI; a soak run raises it).
pub fn fault_requests(default: u64) -> u64 {
    std::env::var("OUTRIDER_FAULT_REQUESTS").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

/// Counts of a load: requests sent, answered 200 whole, and failed (anything else).
#[derive(Debug, Default)]
pub struct Counts {
    pub sent: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

impl Counts {
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::SeqCst)
    }
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }
}

/// Clients sending GETs through the proxy, one at a time each, until asked to finish:
/// then they go on until at least `target` requests were sent in all. A hard bound of
/// `100 × target` requests ends them in any case, so no test loops forever. Odd-numbered
/// clients keep their connection ([`KeepAlive`]); even ones open one per request.
pub struct Load {
    pub counts: Arc<Counts>,
    finish: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Vec<String>>>,
    target: u64,
}

impl Load {
    pub fn start(port: u16, clients: usize, target: u64) -> Self {
        let counts = Arc::new(Counts::default());
        let finish = Arc::new(AtomicBool::new(false));
        let bound = target.saturating_mul(100);
        let clients = (0..clients)
            .map(|i| {
                let (counts, finish) = (counts.clone(), finish.clone());
                let mut keep_alive = (i % 2 == 1).then(KeepAlive::default);
                tokio::spawn(async move {
                    let mut errors = Vec::new();
                    loop {
                        let sent = counts.sent.fetch_add(1, Ordering::SeqCst);
                        if sent >= bound || (finish.load(Ordering::SeqCst) && sent >= target) {
                            counts.sent.fetch_sub(1, Ordering::SeqCst);
                            return errors;
                        }
                        let outcome = match keep_alive.as_mut() {
                            Some(client) => client.get(port, "/").await,
                            None => get(port, "/").await,
                        };
                        match outcome {
                            Ok(answer) if answer.ok() => {
                                counts.succeeded.fetch_add(1, Ordering::SeqCst);
                            }
                            outcome => {
                                counts.failed.fetch_add(1, Ordering::SeqCst);
                                if errors.len() < 5 {
                                    errors.push(match outcome {
                                        Ok(answer) => format!("{} {}", answer.status, answer.text()),
                                        Err(error) => error,
                                    });
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Self { counts, finish, clients, target }
    }

    /// Waits until `more` further requests have been answered (either way): proof that
    /// traffic flows through whatever the test is doing now.
    pub async fn wait_answered(&self, more: u64) {
        let counts = &self.counts;
        let base = counts.succeeded() + counts.failed();
        wait::until_sync("requests answered", || counts.succeeded() + counts.failed() >= base + more).await;
    }

    /// Lets the clients finish once `target` requests were sent; returns the counts and
    /// the first errors seen.
    pub async fn finish(self) -> (u64, u64, u64, Vec<String>) {
        self.finish.store(true, Ordering::SeqCst);
        let mut errors = Vec::new();
        for client in self.clients {
            errors.extend(client.await.unwrap());
        }
        let c = &self.counts;
        (c.sent(), c.succeeded(), c.failed(), errors)
    }
}
