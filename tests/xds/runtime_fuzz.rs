//! The runtime fuzzer: generated configurations (`common::config_gen`) are pushed over real
//! gRPC ADS, SotW and Delta, to a running Outrider while two client tasks send HTTP/1.1
//! and HTTP/2 requests to the listener ports without pause.
//!
//! After every step: the ADS stream answered each response with an ACK or a NACK, it is
//! still the one stream Outrider opened, no supervised task died, nothing panicked (a
//! panic hook records every panic, in Outrider's threads too), and the process's resident
//! memory grew by less than a generous bound. Every request ends in a response (any
//! status) or a closed or refused connection; the client's 10 s bound on each request is a
//! liveness check (a hang), not a timing assertion: backends answer at once and nothing
//! generated holds a request on purpose. At the end a known-good configuration is pushed
//! and a request through it must succeed.
//!
//! `OUTRIDER_FUZZ_STEPS` (default 25 per protocol) sets the number of steps,
//! `OUTRIDER_FUZZ_SEED` the seed (printed at the start, so a failure can be replayed) and
//! `OUTRIDER_FUZZ_HEAVY` lets rings reach their largest size (8M entries, tens of seconds
//! to build in a debug build), `OUTRIDER_FUZZ_REQUEST_BOUND` changes the 10 s bound and
//! `OUTRIDER_FUZZ_LOG` (a log filter) prints Outrider's logs; `bench/soak.sh` runs a long
//! one in release with `OUTRIDER_FUZZ_HEAVY`.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::backends;
use common::config_gen::{Config, Generator, HOSTS, PATHS};
use common::lab::{self, free_port, stat};
use common::{ControlPlane, WAIT, bootstrap, pack, wait, wait_snapshot};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::app::{Running, StartOptions};
use outrider::config::ResourceType;
use outrider::xds::server::Journal;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// How long one request may take before it counts as a hang. Generous on purpose;
/// `OUTRIDER_FUZZ_REQUEST_BOUND` (seconds) changes it, to see how a stall ends.
fn request_bound() -> Duration {
    Duration::from_secs(env_u64("OUTRIDER_FUZZ_REQUEST_BOUND").unwrap_or(10))
}
/// How much the resident set may grow over the run. Generous: the largest legal ring
/// (8M entries) and maglev table (5M) are tens of MB each, and a debug build's allocator
/// keeps what it freed; a leak per step would still cross it in a long run.
const RSS_GROWTH_BOUND_KB: u64 = 1024 * 1024;

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records every panic, on any thread, before the default hook prints it.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.lock().unwrap_or_else(|p| p.into_inner()).push(info.to_string());
        default(info);
    }));
}

fn panics() -> Vec<String> {
    PANICS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    let value = value.trim();
    match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    }
}

// === the client ===

/// How requests ended, by kind.
#[derive(Default)]
struct Tally {
    sent: AtomicUsize,
    responses: AtomicUsize,
    /// Connection refused: no listener on the port (yet).
    refused: AtomicUsize,
    /// Closed or reset before or during the response.
    closed: AtomicUsize,
    /// The step each hung request started at, and what it was.
    hangs: Mutex<Vec<(usize, String)>>,
    statuses: Mutex<BTreeMap<u16, usize>>,
    /// The longest request and how it ended.
    slowest: Mutex<(Duration, String)>,
}

impl Tally {
    fn done(&self) -> usize {
        self.responses.load(Ordering::SeqCst) + self.refused.load(Ordering::SeqCst) + self.closed.load(Ordering::SeqCst)
    }
    fn hung(&self) -> bool {
        !self.hangs.lock().unwrap().is_empty()
    }
}

enum Outcome {
    Response(u16),
    Refused,
    Closed,
}

/// One connection the client keeps for reuse, so that connections outlive the listener
/// configuration they were accepted under.
enum Kept {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

async fn connect(port: u16, h2: bool) -> Result<Kept, Outcome> {
    let stream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(Outcome::Refused),
        Err(_) => return Err(Outcome::Closed),
    };
    // The listener ports are in the ephemeral range: with nothing listening on `port`, the
    // kernel may pick `port` itself as the source and connect the socket to itself (a TCP
    // self-connect), which nothing will ever answer. That is the port being free, as a
    // refusal is, not Outrider holding a connection.
    if stream.local_addr().ok() == stream.peer_addr().ok() {
        return Err(Outcome::Refused);
    }
    let io = TokioIo::new(stream);
    if h2 {
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.map_err(|_| Outcome::Closed)?;
        tokio::spawn(connection);
        Ok(Kept::H2(sender))
    } else {
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|_| Outcome::Closed)?;
        tokio::spawn(connection);
        Ok(Kept::H1(sender))
    }
}

/// How far a request got: reported with a hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Ready,
    Sent,
    Head,
}

async fn request(kept: &mut Kept, host: &str, path: &str, header: bool, phase: &Mutex<Phase>) -> Outcome {
    let mut builder = http::Request::get(format!("http://{host}{path}"));
    if header {
        builder = builder.header("x-fuzz", "1");
    }
    let set = |p: Phase| *phase.lock().unwrap() = p;
    let response = match kept {
        Kept::H1(sender) => {
            if sender.ready().await.is_err() {
                return Outcome::Closed;
            }
            set(Phase::Sent);
            let request = builder.header("host", host).body(Full::new(Bytes::new())).unwrap();
            sender.send_request(request).await
        }
        Kept::H2(sender) => {
            if sender.ready().await.is_err() {
                return Outcome::Closed;
            }
            set(Phase::Sent);
            sender.send_request(builder.body(Full::new(Bytes::new())).unwrap()).await
        }
    };
    let Ok(response) = response else { return Outcome::Closed };
    let status = response.status().as_u16();
    set(Phase::Head);
    match response.into_body().collect().await {
        Ok(_) => Outcome::Response(status),
        // The head came; the body was cut: still an end, not a hang.
        Err(_) => Outcome::Closed,
    }
}

/// Sends requests until `stop`: random port, protocol, host, path; a kept connection is
/// reused half of the time.
async fn client(mut rng: SmallRng, ports: Vec<u16>, tally: Arc<Tally>, stop: Arc<AtomicBool>, step: Arc<AtomicUsize>) {
    let mut kept: HashMap<(u16, bool), Kept> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        let port = ports[rng.random_range(0..ports.len())];
        let h2 = rng.random_bool(0.5);
        let host = HOSTS[rng.random_range(0..HOSTS.len())];
        let path = PATHS[rng.random_range(0..PATHS.len())];
        let header = rng.random_bool(0.3);
        let reuse = rng.random_bool(0.5);
        tally.sent.fetch_add(1, Ordering::SeqCst);
        let started = step.load(Ordering::SeqCst);
        let reused = if reuse { kept.remove(&(port, h2)) } else { None };
        let phase = Mutex::new(Phase::Connecting);
        let attempt = async {
            let mut connection = match reused {
                Some(connection) => connection,
                None => match connect(port, h2).await {
                    Ok(connection) => connection,
                    Err(outcome) => return (outcome, None),
                },
            };
            *phase.lock().unwrap() = Phase::Ready;
            let outcome = request(&mut connection, host, path, header, &phase).await;
            (outcome, Some(connection))
        };
        let began = tokio::time::Instant::now();
        let ended = tokio::time::timeout(request_bound(), attempt).await;
        let took = began.elapsed();
        if took > tally.slowest.lock().unwrap().0 {
            let how = match &ended {
                Ok((Outcome::Response(status), _)) => format!("{status}"),
                Ok((Outcome::Refused, _)) => "refused".to_owned(),
                Ok((Outcome::Closed, _)) => "closed".to_owned(),
                Err(_) => "hung".to_owned(),
            };
            *tally.slowest.lock().unwrap() = (took, format!("{how}: GET http://{host}{path} at step {started}"));
        }
        match ended {
            Ok((outcome, connection)) => match outcome {
                Outcome::Response(status) => {
                    tally.responses.fetch_add(1, Ordering::SeqCst);
                    *tally.statuses.lock().unwrap().entry(status).or_default() += 1;
                    if let Some(connection) = connection {
                        kept.insert((port, h2), connection);
                    }
                }
                Outcome::Refused => _ = tally.refused.fetch_add(1, Ordering::SeqCst),
                Outcome::Closed => _ = tally.closed.fetch_add(1, Ordering::SeqCst),
            },
            Err(_) => {
                let proto = if h2 { "HTTP/2" } else { "HTTP/1.1" };
                tally.hangs.lock().unwrap().push((
                    started,
                    format!("step {started}: {proto} GET http://{host}{path} on port {port} (reused: {reuse}, x-fuzz: {header}), stuck after {:?}", phase.lock().unwrap()),
                ));
            }
        }
    }
}

// === the ADS stream ===

/// What the ADS journal showed so far, checked incrementally (a long run has a long
/// journal).
#[derive(Default)]
struct StreamCheck {
    requests_seen: usize,
    responses_checked: usize,
    /// (stream, type URL, nonce) → whether the answer was a NACK.
    answers: HashMap<(u64, String, String), bool>,
    streams: std::collections::BTreeSet<u64>,
    acks: usize,
    nacks: usize,
    nack_reasons: BTreeMap<String, usize>,
}

impl StreamCheck {
    /// Whether every response sent so far has been answered; also the expected ones.
    fn settled(&mut self, journal: &Journal, expected: &[(String, String)]) -> bool {
        // The journal keeps its latest entries only: positions count from the server's
        // first entry, and none may have been let go before it was read here.
        let first_request = journal.dropped_requests as usize;
        let first_response = journal.dropped_responses as usize;
        assert!(
            self.requests_seen >= first_request && self.responses_checked >= first_response,
            "the xDS journal let go of entries not yet checked: give the server a larger journal limit"
        );
        for r in &journal.requests[self.requests_seen - first_request..] {
            self.streams.insert(r.stream);
            if !r.response_nonce.is_empty() {
                self.answers.insert((r.stream, r.type_url.clone(), r.response_nonce.clone()), r.error_detail.is_some());
                if let Some(error) = &r.error_detail {
                    // The message's first words name the field path; enough to tell kinds apart.
                    let kind: String = error.message.chars().take(400).collect();
                    *self.nack_reasons.entry(kind).or_default() += 1;
                }
            }
        }
        self.requests_seen = first_request + journal.requests.len();
        while let Some(response) = journal.responses.get(self.responses_checked - first_response) {
            self.streams.insert(response.stream);
            let key = (response.stream, response.type_url.clone(), response.nonce.clone());
            match self.answers.get(&key) {
                Some(true) => self.nacks += 1,
                Some(false) => self.acks += 1,
                None => return false,
            }
            self.responses_checked += 1;
        }
        expected.iter().all(|(type_url, version)| {
            journal.responses.iter().rev().any(|r| &r.type_url == type_url && &r.version == version)
        })
    }
}

// === the run ===

struct Run {
    control_plane: ControlPlane,
    outrider: Running,
    check: StreamCheck,
    pushed: usize,
    seed: u64,
}

impl Run {
    /// Pushes `config` (clusters and endpoints first, as a control plane should) and waits
    /// until Outrider answered everything it was sent.
    async fn apply(&mut self, config: &Config, step: usize) {
        let types = [
            (ResourceType::Cluster, &config.clusters),
            (ResourceType::ClusterLoadAssignment, &config.endpoints),
            (ResourceType::Listener, &config.listeners),
            (ResourceType::RouteConfiguration, &config.routes),
        ];
        let mut expected = Vec::new();
        for (resource_type, values) in types {
            let yamls: Vec<String> = values.iter().map(Value::to_string).collect();
            let items = yamls.iter().map(|y| pack(resource_type, y)).collect();
            let before = self.control_plane.server.version();
            self.control_plane.server.set_resources(resource_type.type_url(), items);
            let after = self.control_plane.server.version();
            // LDS and CDS are wildcard subscriptions: a change is always sent. RDS and EDS
            // go out only for names Outrider asks for; those are checked by "answered".
            if after != before && resource_type.is_wildcard() {
                expected.push((resource_type.type_url().to_owned(), after.to_string()));
            }
            self.pushed += values.len();
        }
        let check = &mut self.check;
        let settled = self.control_plane.server.wait_until(WAIT * 3, |j| check.settled(j, &expected)).await;
        if settled.is_err() {
            let journal = self.control_plane.server.journal();
            let tail: Vec<_> = journal.responses.iter().rev().take(6).collect();
            panic!(
                "seed {:#x}, step {step}: ADS responses not answered (ACK or NACK); last responses: {tail:#?}",
                self.seed
            );
        }
        assert_eq!(self.check.streams.len(), 1, "seed {:#x}, step {step}: the ADS stream was re-opened", self.seed);
    }

    fn assert_alive(&self, step: usize) {
        let seed = self.seed;
        assert_eq!(self.outrider.supervisor.failure(), None, "seed {seed:#x}, step {step}: a supervised task died");
        assert_eq!(stat(&self.outrider, "outrider.supervisor.failures"), Some(0.0), "seed {seed:#x}, step {step}");
        assert_eq!(panics(), Vec::<String>::new(), "seed {seed:#x}, step {step}: panicked");
    }
}

/// Fails on a hung request, with the configurations it was sent under.
fn assert_no_hang(tally: &Tally, history: &[Config], seed: u64, outrider: &Running) {
    let hangs = tally.hangs.lock().unwrap().clone();
    let Some((step, _)) = hangs.first() else { return };
    let from = step.saturating_sub(5);
    for (i, config) in history.iter().enumerate().skip(from).take(7) {
        println!("configuration of step {i}:");
        for value in config.clusters.iter().chain(&config.endpoints).chain(&config.listeners).chain(&config.routes) {
            println!("  {value}");
        }
    }
    // What Outrider holds open, to tell where the request waits.
    use outrider::telemetry::stats::Value as Stat;
    for (name, value) in outrider.stats.samples() {
        let busy = ["_active", "pending", "cx_total", "rq_total", "overflow", "timeout"];
        let nonzero = match value {
            Stat::Counter(n) => n > 0,
            Stat::Gauge(g) => g != 0.0,
            _ => false,
        };
        if nonzero && busy.iter().any(|b| name.flat.contains(b)) {
            println!("  {} = {value:?}", name.flat);
        }
    }
    let hangs: Vec<&String> = hangs.iter().map(|(_, h)| h).collect();
    panic!("seed {seed:#x}: requests hung: {hangs:#?}");
}

/// The seed and steps of a run: the environment's, else the test's own.
fn knobs(default_seed: u64) -> (u64, usize) {
    let seed = env_u64("OUTRIDER_FUZZ_SEED").unwrap_or(default_seed);
    let steps = env_u64("OUTRIDER_FUZZ_STEPS").unwrap_or(25) as usize;
    (seed, steps)
}

async fn runtime_fuzz(api_type: &str, (seed, steps): (u64, usize)) {
    install_panic_hook();
    // `OUTRIDER_FUZZ_LOG=<filter>`: Outrider's logs on stderr, to see where a hang waits.
    if let Ok(filter) = std::env::var("OUTRIDER_FUZZ_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    }
    println!("runtime fuzz over {api_type}: seed {seed:#x} (OUTRIDER_FUZZ_SEED), {steps} steps (OUTRIDER_FUZZ_STEPS)");
    if std::env::var_os("OUTRIDER_FUZZ_HEAVY").is_some() {
        println!("OUTRIDER_FUZZ_HEAVY: rings up to 8M entries");
    }

    let mut backend_ports = Vec::new();
    for name in ["b0", "b1", "b2"] {
        backend_ports.push(backends::healthy(name).await.port);
    }
    let listener_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let control_plane = ControlPlane::start().await;
    let options = StartOptions { concurrency: 2, rng_seed: Some(seed), ..StartOptions::default() };
    // Outrider's control side gets a runtime of its own, as in the binary: a long balancer
    // build there (an 8M-entry ring is legal) must not stall the test's client, whose
    // requests measure Outrider's workers.
    let outrider_runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let bootstrap = bootstrap(control_plane.port, api_type);
    let outrider =
        outrider_runtime.spawn(outrider::app::start_with_options(bootstrap, options)).await.unwrap().unwrap();
    let mut run = Run { control_plane, outrider, check: StreamCheck::default(), pushed: 0, seed };
    let heavy = std::env::var_os("OUTRIDER_FUZZ_HEAVY").is_some();
    let mut generator =
        Generator::new(SmallRng::seed_from_u64(seed), listener_ports.clone(), backend_ports.clone(), heavy);

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let step_now = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..2u64)
        .map(|i| {
            let rng = SmallRng::seed_from_u64(seed.wrapping_add(1 + i));
            tokio::spawn(client(rng, listener_ports.clone(), tally.clone(), stop.clone(), step_now.clone()))
        })
        .collect();

    let mut config = generator.config();
    let mut history = vec![config.clone()];
    run.apply(&config, 0).await;
    run.assert_alive(0);
    let rss_start = rss_kb();
    let mut rss_max = rss_start;
    for step in 1..=steps {
        step_now.store(step, Ordering::SeqCst);
        config = generator.next(&config);
        history.push(config.clone());
        run.apply(&config, step).await;
        // Requests flow under this configuration before the next one: two more ended.
        let done = tally.done();
        wait::until_sync("requests under the step's configuration", || tally.done() >= done + 2 || tally.hung()).await;
        run.assert_alive(step);
        assert_no_hang(&tally, &history, seed, &run.outrider);
        let rss = rss_kb();
        rss_max = rss_max.max(rss);
        assert!(
            rss.saturating_sub(rss_start) < RSS_GROWTH_BOUND_KB,
            "seed {seed:#x}, step {step}: resident memory grew from {rss_start} kB to {rss} kB"
        );
    }

    stop.store(true, Ordering::SeqCst);
    for c in clients {
        tokio::time::timeout(request_bound() * 2, c).await.expect("the client did not stop").unwrap();
    }
    assert_no_hang(&tally, &history, seed, &run.outrider);

    // A known-good configuration replaces everything, and serves.
    let port = free_port();
    let good = Config {
        clusters: vec![common::config_gen::static_cluster("good", backend_ports[0])],
        endpoints: Vec::new(),
        listeners: vec![common::config_gen::inline_listener("good", port, "good")],
        routes: Vec::new(),
    };
    run.apply(&good, steps + 1).await;
    run.control_plane.wait_acked(ResourceType::Cluster).await;
    run.control_plane.wait_acked(ResourceType::Listener).await;
    wait_snapshot(&run.outrider.store, |s| s.listeners.contains_key("good") && s.clusters.contains_key("good")).await;
    run.outrider.listeners_ready().await;
    let mut published = run.outrider.balancers.subscribe();
    let balanced = async {
        while run.outrider.balancers.get("good").is_none_or(|lb| lb.hosts().is_empty()) {
            published.changed().await.unwrap();
        }
    };
    tokio::time::timeout(WAIT, balanced).await.expect("the known-good cluster has no balancer");
    let answer = lab::get(port, "/").await.unwrap_or_else(|e| panic!("seed {seed:#x}: the known-good listener: {e}"));
    assert!(answer.ok(), "seed {seed:#x}: the known-good route answered {answer:?}");
    assert_eq!(answer.text(), "b0");
    run.assert_alive(steps + 1);

    let statuses = tally.statuses.lock().unwrap().clone();
    println!(
        "runtime fuzz over {api_type}: seed {seed:#x}, {steps} steps, {} resources pushed, {} ACKs, {} NACKs; \
         {} requests: {} responses {statuses:?}, {} refused, {} closed, 0 hung; RSS {rss_start} kB at the start, \
         at most {rss_max} kB",
        run.pushed,
        run.check.acks,
        run.check.nacks,
        tally.sent.load(Ordering::SeqCst),
        tally.responses.load(Ordering::SeqCst),
        tally.refused.load(Ordering::SeqCst),
        tally.closed.load(Ordering::SeqCst),
    );
    let (took, slowest) = tally.slowest.lock().unwrap().clone();
    println!("  slowest request: {took:?}, {slowest}");
    for (reason, n) in &run.check.nack_reasons {
        println!("  NACK ×{n}: {reason}");
    }
    run.outrider.stop();
    outrider_runtime.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_fuzz_sotw() {
    runtime_fuzz("GRPC", knobs(0x5eed_0001)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_fuzz_delta() {
    runtime_fuzz("DELTA_GRPC", knobs(0x5eed_0002)).await;
}

// === findings ===

/// Seed 13 over SotW: around steps 38–42, after listeners move between ports, a new
/// HTTP/1.1 connection connects but its request gets no response within 10 s, with no
/// connection active in Outrider (about one run in three). Open. A TCP self-connect (a
/// client given the free port itself as its source) is ruled out by `connect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open finding: a new connection after listener address changes gets no answer (bench/RESULTS.md)"]
async fn request_hangs_on_old_port_after_listener_address_change_seed_13() {
    runtime_fuzz("GRPC", (13, 43)).await;
}

/// Found by seed 13 over SotW (step 24): a cluster whose upstream protocol changes from
/// HTTP/2 to HTTP/1.1 while HTTP/2 connections to its endpoints are open, with
/// `max_connections: 0`. The leftover HTTP/2 connections counted as the pool's, so no
/// HTTP/1.1 connection was opened and every request waited for the route timeout (504
/// after 15 s); Envoy's new pool has no connection and opens one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_cluster_from_http2_to_http1_under_max_connections_0() {
    use common::config_gen::{inline_listener, static_cluster};
    use serde_json::json;
    let backend = backends::healthy("b0").await;
    let control_plane = ControlPlane::start().await;
    let port = free_port();
    let mut h2 = static_cluster("c", backend.port);
    h2["typed_extension_protocol_options"] = json!({ "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": { "http2_protocol_options": {} } } });
    let h1 = json!({
        "name": "c", "type": "EDS", "connect_timeout": "1s", "lb_policy": "MAGLEV",
        "eds_cluster_config": { "eds_config": { "ads": {}, "resource_api_version": "V3" } },
        "circuit_breakers": { "thresholds": [{ "max_connections": 0, "max_pending_requests": u32::MAX }] },
    });
    let endpoints = json!({ "cluster_name": "c", "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
        "socket_address": { "address": "127.0.0.1", "port_value": backend.port } } } }] }] });
    let set = |resource_type: ResourceType, value: &Value| {
        let item = pack(resource_type, &value.to_string());
        control_plane.server.set_resources(resource_type.type_url(), vec![item]);
    };
    set(ResourceType::Cluster, &h2);
    set(ResourceType::ClusterLoadAssignment, &endpoints);
    set(ResourceType::Listener, &inline_listener("l", port, "c"));
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "GRPC"), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    outrider.listeners_ready().await;
    // Concurrent requests, so that HTTP/2 connections are open when the protocol changes.
    let requests: Vec<_> = (0..6).map(|_| tokio::spawn(lab::get(port, "/"))).collect();
    for request in requests {
        assert!(request.await.unwrap().unwrap().ok(), "over HTTP/2");
    }
    set(ResourceType::Cluster, &h1);
    let version = control_plane.server.version().to_string();
    wait_snapshot(&outrider.store, |s| s.clusters.get("c").is_some_and(|c| c.version == version)).await;
    for _ in 0..3 {
        let answer = lab::get(port, "/").await.unwrap();
        assert!(answer.ok(), "over HTTP/1.1 after the change: {answer:?}");
    }
    outrider.stop();
}
