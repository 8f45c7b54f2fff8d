//! The request edge side by side with Envoy 1.40: one bootstrap, Istio-shaped connection
//! managers (the sidecar's inbound as istiod renders it, PERMISSIVE and STRICT, XFCC
//! `APPEND_FORWARD` with subject, DNS and URI; the outbound `0.0.0.0_<port>` one; and a few
//! variants for the fields Istio leaves at their defaults), certificates made here, one
//! recording backend. Every case is sent to Envoy and to Outrider; what the client reads and
//! the request head the backend receives are compared after normalisation
//! (`common::edge::normalise`).
//!
//! The test fails when a case differs and is not in [`known::KNOWN`] with its reason, and whenever
//! Outrider forwards a request that Envoy refuses, whatever [`known::KNOWN`] says.

mod cases;
mod config;
mod known;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::common::edge::{self, ParsedHead, Proxies, RawH2, Recorder, Response, normalise};
use crate::common::skip::{Tool, skipped};
use crate::tls_support::pki::{self, Ca, Leaf};
use crate::tls_support::{client_config, tls_connect};
use cases::{Case, Client, Request, corpus};
use config::{LISTENERS, bootstrap};
use known::{KNOWN, Known, known};

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

struct Identities {
    ca: Ca,
    client: Leaf,
}

/// A connection to `port` as `client`, offering `alpn` over TLS; `Err` when the handshake
/// failed.
async fn connect(port: u16, client: Client, alpn: &str, ids: &Identities) -> Result<Box<dyn Io>, String> {
    let identity = match client {
        Client::Plaintext => return Ok(Box::new(TcpStream::connect(("127.0.0.1", port)).await.unwrap())),
        Client::Mtls => Some(&ids.client),
        Client::TlsNoCertificate => None,
    };
    match tls_connect(port, client_config(&ids.ca, identity, &[alpn])).await {
        Ok(stream) => Ok(Box::new(stream)),
        Err(_) => Err("TLS handshake failed".to_owned()),
    }
}

/// What one proxy did with one case: what the client read, and the request heads the
/// backend received (normalised).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    client: Vec<String>,
    upstream: Vec<String>,
}

impl Outcome {
    /// The statuses the client read, for the table.
    fn summary(&self) -> String {
        let client =
            self.client.iter().map(|c| c.split(" | ").next().unwrap_or_default()).collect::<Vec<_>>().join(",");
        let client = if client.is_empty() { "-".to_owned() } else { client };
        format!("{client} (upstream {})", self.upstream.len())
    }
}

fn render_response(response: &Response, sent: &[(String, String)]) -> String {
    let body: String = response.body.chars().take(120).collect();
    format!("{} | {} | body {:?}", response.status, normalise(&response.headers, sent).join("; "), body)
}

/// The headers a case sends, for [`normalise`].
fn sent_headers(request: &Request) -> Vec<(String, String)> {
    match request {
        Request::H1(text, _) => ParsedHead::parse(text.split("\r\n\r\n").next().unwrap_or_default()).headers,
        Request::H2(_, _, headers) | Request::H2Raw(headers) => headers.clone(),
    }
}

async fn run(case: &Case, port: u16, ids: &Identities, backend: &Recorder) -> Outcome {
    backend.take();
    let alpn = match case.request {
        Request::H1(..) => "http/1.1",
        _ => "h2",
    };
    let sent = sent_headers(&case.request);
    let client = match connect(port, case.client, alpn, ids).await {
        Err(error) => vec![error],
        Ok(io) => match &case.request {
            Request::H1(text, answers) => edge::h1_exchange(io, text.as_bytes(), *answers)
                .await
                .iter()
                .map(|r| render_response(r, &sent))
                .collect(),
            Request::H2(method, uri, headers) => {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                match edge::h2_request(io, method, uri, &headers).await {
                    Ok(response) => vec![render_response(&response, &sent)],
                    Err(error) => vec![error],
                }
            }
            Request::H2Raw(fields) => {
                let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                vec![match edge::h2_raw(io, &fields).await {
                    RawH2::Status(status) => status.to_string(),
                    other => other.to_string(),
                }]
            }
        },
    };
    let upstream = backend
        .take()
        .iter()
        .map(|head| {
            let head = ParsedHead::parse(head);
            format!("{} | {}", head.start, normalise(&head.headers, &sent).join("; "))
        })
        .collect();
    Outcome { client, upstream }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_edge_agrees_with_envoy() {
    let ca = Ca::new("cluster.local root");
    let server = ca.leaf(&pki::spiffe("app"));
    let ids = Identities { client: ca.leaf(&pki::spiffe("client")), ca };
    let (backend_port, backend) = edge::recording_backend().await;
    let Some(proxies) = Proxies::start(LISTENERS, |ports| bootstrap(ports, backend_port, &server, &ids.ca)).await
    else {
        skipped(Tool::Envoy, "the request edge corpus", "envoy not found");
        return;
    };
    let cases = corpus();
    let mut agreements = 0;
    let mut unexplained = Vec::new();
    let mut laxer = Vec::new();
    let mut details = Vec::new();
    let mut differing = Vec::new();
    let mut fixed = Vec::new();
    println!("{:<58} | {:<10} | {:<28} | {:<28} | verdict", "case", "listener", "envoy", "outrider");
    for case in &cases {
        let (envoy_port, outrider_port) = proxies.ports[case.listener];
        let envoy = run(case, envoy_port, &ids, &backend).await;
        let outrider = run(case, outrider_port, &ids, &backend).await;
        let verdict = if envoy == outrider {
            agreements += 1;
            if known(&case.name).is_some() {
                // Not a failure: fixes land one at a time. The entry should go.
                fixed.push(case.name.clone());
            }
            "agree".to_owned()
        } else {
            details.push(format!("{}\n  envoy:    {:?}\n  outrider: {:?}", case.name, envoy, outrider));
            differing.push((case.name.clone(), case.listener, envoy.summary(), outrider.summary()));
            match known(&case.name) {
                Some(Known::Fixing(why)) => format!("differs, being fixed: {why}"),
                Some(Known::Open(why)) => format!("differs, open: {why}"),
                Some(Known::Reason(why)) => format!("differs, accepted: {why}"),
                None => {
                    unexplained.push(case.name.clone());
                    "DIFFERS (not in KNOWN)".to_owned()
                }
            }
        };
        if envoy.upstream.is_empty() && !outrider.upstream.is_empty() {
            laxer.push(format!("{}: {:?}", case.name, outrider.upstream));
        }
        println!(
            "{:<58} | {:<10} | {:<28} | {:<28} | {verdict}",
            case.name,
            case.listener,
            envoy.summary(),
            outrider.summary()
        );
    }
    println!("\nthe request edge agrees with Envoy 1.40 on {agreements} of {} cases\n", cases.len());
    for detail in &details {
        println!("{detail}\n");
    }
    // The differences as docs/edge.md lists them.
    println!("| case | listener | Envoy | Outrider | kind | reason |\n| --- | --- | --- | --- | --- | --- |");
    for (name, listener, envoy, outrider) in &differing {
        let (kind, why) = match known(name) {
            Some(Known::Fixing(why)) => ("being fixed", why),
            Some(Known::Open(why)) => ("open", why),
            Some(Known::Reason(why)) => ("accepted", why),
            None => ("not listed", ""),
        };
        println!("| {name} | `{listener}` | {envoy} | {outrider} | {kind} | {why} |");
    }
    if !fixed.is_empty() {
        println!("\nKNOWN lists cases that agree now (remove them): {fixed:?}");
    }
    let stale: Vec<_> = KNOWN.iter().filter(|(name, _)| !cases.iter().any(|c| c.name == *name)).collect();
    assert!(stale.is_empty(), "KNOWN names cases that do not exist: {stale:?}");
    assert!(cases.len() >= 80, "{} cases", cases.len());
    assert!(laxer.is_empty(), "Outrider forwarded what Envoy refused:\n{}", laxer.join("\n"));
    assert!(unexplained.is_empty(), "differences not in KNOWN:\n{}", unexplained.join("\n"));
    proxies.outrider.stop();
}
