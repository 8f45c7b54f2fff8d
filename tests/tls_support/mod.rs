//! Shared pieces of the TLS tests: a PKI made in the test (rcgen, SPIFFE URI SANs), sidecars
//! configured over ADS with their certificates delivered by SDS on the same stream, an echo
//! backend that tells which HTTP version and scheme reached it, and TLS clients.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod pki;
pub mod yaml;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::ResourceType;
use outrider::tls::Refusal;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

use crate::common::{ControlPlane, WAIT, bootstrap, wait_snapshot};

/// A loopback port for an Outrider listener. The port stays reserved for the life of the
/// test process by a bound (never listening) SO_REUSEPORT socket: Outrider's listeners
/// bind beside it, and no other test can be handed the same port meanwhile (a port bound
/// and released at once could be, and its connections would reach the wrong proxy).
pub fn free_port() -> u16 {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&addr(0).into()).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    std::mem::forget(socket);
    port
}

/// One Outrider with its own control plane.
pub struct Sidecar {
    pub control_plane: ControlPlane,
    pub outrider: outrider::app::Running,
}

impl Sidecar {
    /// Starts Outrider (one worker) serving `listeners`, `clusters` and `secrets`, and
    /// waits until every listener accepts connections.
    pub async fn start(listeners: &[&str], clusters: &[&str], secrets: &[&str]) -> Self {
        let control_plane = ControlPlane::start().await;
        control_plane.set(ResourceType::Secret, secrets);
        control_plane.set(ResourceType::Cluster, clusters);
        control_plane.set(ResourceType::Listener, listeners);
        let outrider = outrider::app::start_with(bootstrap(control_plane.port, "DELTA_GRPC"), 1).await.unwrap();
        wait_snapshot(&outrider.store, |s| s.ready && s.listeners.len() == listeners.len()).await;
        outrider.listeners_ready().await;
        Self { control_plane, outrider }
    }

    pub fn downstream(&self, refusal: Refusal) -> u64 {
        self.outrider.tls.downstream.refusals(refusal)
    }

    pub fn stop(self) {
        self.outrider.stop();
    }
}

/// A backend answering `<HTTP version> <x-forwarded-proto>` (e.g. `HTTP/2.0 https`).
pub async fn echo_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: http::Request<Incoming>| async move {
                    let proto = request.headers().get("x-forwarded-proto").and_then(|v| v.to_str().ok()).unwrap_or("-");
                    let body = format!("{:?} {proto}", request.version());
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(body))))
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    port
}

/// An HTTP/1.1 GET over `io`: (status, body), or the error that ended it.
pub async fn get_h1<T>(io: T) -> Result<(u16, String), String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = http::Request::get("/").header("host", "app").body(Full::new(Bytes::new())).unwrap();
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Plain HTTP/1.1 to `port`.
pub async fn plain_get(port: u16) -> Result<(u16, String), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio::time::timeout(WAIT, get_h1(stream)).await.unwrap()
}

/// A rustls client: trusts `ca`, presents `identity` if given, offers `alpn`.
pub fn client_config(ca: &pki::Ca, identity: Option<&pki::Leaf>, alpn: &[&str]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(outrider::tls::provider::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(leaf) => builder.with_client_auth_cert(vec![leaf.der()], leaf.key_der()).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    config
}

/// A TLS connection to `port` (server name `server.test`).
pub async fn tls_connect(
    port: u16,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("server.test").unwrap();
    tokio::time::timeout(WAIT, tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, stream)).await.unwrap()
}

/// An HTTP/1.1 GET over TLS; any failure (handshake, alert, closed) is an error.
pub async fn tls_get(port: u16, config: rustls::ClientConfig) -> Result<(u16, String), String> {
    let stream = tls_connect(port, config).await.map_err(|e| e.to_string())?;
    tokio::time::timeout(WAIT, get_h1(stream)).await.unwrap()
}

/// The certificate the server at `port` presents in a new handshake.
pub async fn server_certificate(port: u16, config: rustls::ClientConfig) -> CertificateDer<'static> {
    let stream = tls_connect(port, config).await.unwrap();
    stream.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned()
}

/// Reads until the peer closes (or fails) the connection; returns what came before.
pub async fn read_until_closed<T: AsyncRead + Unpin>(mut io: T) -> Vec<u8> {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(WAIT, io.read_to_end(&mut all)).await.expect("the server closes the connection");
    all
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Attempts a TLS connection and one HTTP/1.1 request that the server must refuse. Waits
/// until the server has closed the TCP connection (it counts a refusal before closing), and
/// returns the client's view of the failure.
pub async fn refused(port: u16, config: rustls::ClientConfig) -> String {
    use tokio::io::AsyncWriteExt;
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("server.test").unwrap();
    let connect = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, stream).into_fallible();
    match tokio::time::timeout(WAIT, connect).await.unwrap() {
        Err((error, stream)) => {
            read_until_closed(stream).await;
            format!("handshake: {error}")
        }
        // TLS 1.3: the client's handshake ends before the server has checked its
        // certificate; the refusal arrives as an alert on the first read.
        Ok(mut tls) => {
            let _ = tls.write_all(b"GET / HTTP/1.1\r\nhost: app\r\n\r\n").await;
            let mut response = Vec::new();
            let read = tokio::time::timeout(WAIT, tls.read_to_end(&mut response)).await.unwrap();
            assert!(response.is_empty(), "refused, yet answered: {}", String::from_utf8_lossy(&response));
            let (stream, _) = tls.into_inner();
            read_until_closed(stream).await;
            match read {
                Err(error) => format!("after handshake: {error}"),
                Ok(_) => "after handshake: closed".to_owned(),
            }
        }
    }
}
