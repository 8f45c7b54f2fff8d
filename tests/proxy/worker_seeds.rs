//! The workers' random draws: seeded from the operating system by default, so two sidecars
//! given the same configuration do not pick the same weighted clusters in lockstep; a
//! fixed seed (`StartOptions::rng_seed`) reproduces a run exactly.

use crate::common;

use bytes::Bytes;
use common::backends;
use common::differential::{HttpListenerExtra, http_listener, raw_http1, static_cluster};
use common::lab::free_port;
use http::Response;
use http_body_util::Full;
use outrider::app::{self, StartOptions};
use outrider::config::bootstrap::Bootstrap;

/// Picks compared: two OS-seeded runs agree on all of them with probability 2^-64.
const REQUESTS: usize = 64;

const VIRTUAL_HOST: &str = r#"              routes:
              - match: { prefix: / }
                route: { weighted_clusters: { clusters: [{ name: a, weight: 50 }, { name: b, weight: 50 }] } }
"#;

fn bootstrap(port: u16, a: u16, b: u16) -> Bootstrap {
    let clusters = static_cluster("a", a) + &static_cluster("b", b);
    let listener = http_listener("l", port, "p", HttpListenerExtra::default(), VIRTUAL_HOST);
    Bootstrap::parse(&format!(
        r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{listener}
  clusters:{clusters}
"#
    ))
    .unwrap()
}

/// Which cluster each of [`REQUESTS`] requests went to, through one Outrider with one worker.
async fn picks(a: u16, b: u16, rng_seed: Option<u64>) -> String {
    let port = free_port();
    let options = StartOptions { concurrency: 1, rng_seed, ..StartOptions::default() };
    let outrider = app::start_with_options(bootstrap(port, a, b), options).await.unwrap();
    outrider.listeners_ready().await;
    let mut seen = String::new();
    for _ in 0..REQUESTS {
        let (status, _, body) = raw_http1(port, "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
        assert_eq!(status, 200);
        seen.push_str(&body);
    }
    outrider.drain_and_stop().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_draw_from_the_operating_system_unless_seeded() {
    let named = |name: &'static str| {
        backends::http(move |_request: http::Request<hyper::body::Incoming>| async move {
            Response::new(Full::new(Bytes::from_static(name.as_bytes())))
        })
    };
    let (a, b) = (named("a").await, named("b").await);
    let first = picks(a.port, b.port, None).await;
    let second = picks(a.port, b.port, None).await;
    assert_ne!(first, second, "two sidecars drew the same {REQUESTS} weighted picks");
    let seeded = picks(a.port, b.port, Some(7)).await;
    assert_eq!(seeded, picks(a.port, b.port, Some(7)).await, "a fixed seed reproduces the run");
}
