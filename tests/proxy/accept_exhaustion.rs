//! Out of file descriptors, the accept loop backs off instead of spinning, and serves
//! again once descriptors free up. The test lowers this process's descriptor limit
//! (`RLIMIT_NOFILE`) until a connection can be queued by the kernel but not accepted by
//! Outrider: `accept` fails with EMFILE for as long as the limit holds. (A test binary of
//! its own: the limit is the whole process's.)

use crate::common;

use std::time::Duration;

use common::differential::{HttpListenerExtra, http_listener, raw_http1};
use common::lab::free_port;
use common::wait;
use outrider::app::{self, StartOptions};
use outrider::config::bootstrap::Bootstrap;
use outrider::telemetry::Value;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

const VIRTUAL_HOST: &str = r#"              routes:
              - match: { prefix: / }
                direct_response: { status: 200, body: { inline_string: ok } }
"#;

fn bootstrap(port: u16) -> Bootstrap {
    let listener = http_listener("l", port, "p", HttpListenerExtra::default(), VIRTUAL_HOST);
    Bootstrap::parse(&format!(
        r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{listener}
"#
    ))
    .unwrap()
}

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn backoffs(body: &str, port: u16) -> u64 {
    let name = format!("outrider.listener.127.0.0.1_{port}.accept_backoff: ");
    body.lines().find_map(|l| l.strip_prefix(&name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// The same counter read in-process, which takes no descriptor.
fn backoffs_counted(outrider: &app::Running, port: u16) -> u64 {
    let name = format!("outrider.listener.127.0.0.1_{port}.accept_backoff");
    match outrider.stats.samples().into_iter().find(|(n, _)| n.flat == name) {
        Some((_, Value::Counter(n))) => n,
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accept_loop_backs_off_on_emfile_and_recovers() {
    let port = free_port();
    let options = StartOptions { concurrency: 1, rng_seed: Some(1), ..StartOptions::default() };
    let outrider = app::start_with_options(bootstrap(port), options).await.unwrap();
    outrider.listeners_ready().await;
    let (status, _, body) = raw_http1(port, "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    // The admin connection the test reads stats over, opened before the limit drops.
    let admin = outrider.admin_address;

    let original = getrlimit(Resource::Nofile);
    // Room for the clients below and nothing more: once they are connected, every
    // descriptor is taken and Outrider's accept of the next queued connection fails.
    let mut clients = Vec::new();
    let limit = open_descriptors() + 8;
    setrlimit(Resource::Nofile, Rlimit { current: Some(limit), maximum: original.maximum }).unwrap();
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => clients.push(stream),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("connect: {e}"),
        }
        assert!(clients.len() < 64, "the limit never bit");
    }
    // The last connections are queued in the kernel; Outrider cannot accept them. Once the
    // loop has met EMFILE (polled: the counter has no change notification; read in-process,
    // since no descriptor is left for the admin server), it is left to meet it for a while.
    wait::until_sync("an accept failed for want of descriptors", || backoffs_counted(&outrider, port) >= 1).await;
    // Not a synchronisation: this stretch of real time is what is measured. Failures per
    // unit of time tell a loop that backs off (1 ms doubling to 1 s: about ten in this
    // window) from one that retries at once (millions), and the accept loop runs on the
    // worker's own runtime, whose clock a test cannot pause.
    tokio::time::sleep(Duration::from_millis(500)).await;
    setrlimit(Resource::Nofile, original).unwrap();
    drop(clients);

    let (_, stats) = common::admin_get(admin, "/stats").await;
    let count = backoffs(&stats, port);
    println!("failed accepts while out of descriptors: {count}");
    assert!(count >= 1, "accept never failed for want of descriptors:\n{stats}");
    assert!(count < 100, "the accept loop spun: {count} failed accepts");
    // Descriptors are back: the listener serves again.
    let (status, _, body) = raw_http1(port, "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}
