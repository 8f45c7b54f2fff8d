//! Load reported by the server's sidecar: an application that sends no ORCA sits behind
//! Outrider B (an INBOUND listener, STRICT mutual TLS); Outrider A (an OUTBOUND listener)
//! calls it over mTLS. B adds its report about the application to the answers, A feeds it
//! to the endpoint's stats like an application's own report and takes it off before its
//! client sees it; neither application sees the ask.

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::common::differential::raw_http1;
use crate::common::skip::{Tool, skipped};
use crate::common::{admin_get, backends, wait};
use crate::tls_support::pki::{self, Ca};
use crate::tls_support::yaml::{self, Http};
use crate::tls_support::{Sidecar, free_port, get_h1};

/// An application answering `asked` when the load report's ask reached it (it must not),
/// else `ok`; it sends no ORCA.
async fn application() -> backends::Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let asked = request.headers().contains_key("x-outrider-load-report");
        http::Response::new(Full::new(Bytes::from_static(if asked { b"asked" } else { b"ok" })))
    })
    .await
}

/// Sidecar B: STRICT mTLS inbound on `port`, to the application on `app`.
async fn server_sidecar(ca: &Ca, port: u16, app: u16) -> Sidecar {
    let tls = yaml::common_tls(&["http/1.1"], json!({ "exact": pki::spiffe("client") }));
    let chain =
        yaml::chain("mtls", json!({ "transport_protocol": "tls" }), yaml::downstream_tls(tls, true), yaml::hcm("app"));
    let listener = yaml::listener("inbound", port, true, vec![chain], json!({ "traffic_direction": "INBOUND" }));
    let cluster = yaml::cluster("app", app, Http::Downstream, Value::Null, Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("server"))), yaml::roots_secret(ca)];
    Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await
}

/// Sidecar A: plaintext outbound on `port`, mTLS to B on `upstream`.
async fn client_sidecar(ca: &Ca, port: u16, upstream: u16) -> Sidecar {
    let tls = yaml::common_tls(&[], json!({ "exact": pki::spiffe("server") }));
    let transport = yaml::upstream_tls(tls, "outbound_.80_._.b.default.svc.cluster.local");
    let cluster = yaml::cluster("b", upstream, Http::Http1, transport, Value::Null);
    let chain = yaml::chain("http", json!({}), Value::Null, yaml::hcm("b"));
    let listener = yaml::listener("outbound", port, false, vec![chain], json!({ "traffic_direction": "OUTBOUND" }));
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("client"))), yaml::roots_secret(ca)];
    Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await
}

/// A GET through A that asks for a report itself: (status, body, whether the answer
/// carried an ORCA header).
async fn call(port: u16) -> (u16, String, bool) {
    let request = "GET / HTTP/1.1\r\nhost: b\r\nx-outrider-load-report: 1\r\nconnection: close\r\n\r\n";
    let (status, headers, body) = raw_http1(port, request).await;
    (status, body, headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("endpoint-load-metrics")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sidecar_reports_its_applications_load_to_the_calling_sidecar() {
    let ca = Ca::new("mesh root");
    let app = application().await;
    let (port_a, port_b) = (free_port(), free_port());
    let b = server_sidecar(&ca, port_b, app.port).await;
    let a = client_sidecar(&ca, port_a, port_b).await;
    // Calls until A's view of B carries a report B made: it needs a rate, over a few of
    // B's refreshes.
    let endpoint = format!("b::127.0.0.1:{port_b}::last_orca_report::");
    let report = wait::until("a load report from the server's sidecar", async || {
        for _ in 0..5 {
            let (status, body, orca) = call(port_a).await;
            assert_eq!(
                (status, body.as_str(), orca),
                (200, "ok", false),
                "neither application sees the report or its ask"
            );
        }
        let (_, clusters) = admin_get(a.outrider.admin_address, "/clusters").await;
        clusters.lines().find_map(|l| l.strip_prefix(&endpoint)).map(str::to_owned)
    })
    .await;
    let report: Value = serde_json::from_str(&report).unwrap();
    assert!(report["rps_fractional"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["named_metrics"]["latency_ms"].as_f64().is_some(), "{report}");
    assert!(report["named_metrics"].get("in_flight").is_some(), "{report}");
    // A plaintext client cannot ask B for it: B answers only callers with a mesh identity,
    // and this one has none (STRICT: its connection is refused before any request).
    assert!(get_h1(tokio::net::TcpStream::connect(("127.0.0.1", port_b)).await.unwrap()).await.is_err());
    a.stop();
    b.stop();
}

#[test]
fn the_off_switch_is_node_metadata_and_other_values_are_refused() {
    let parse = |value: &str| {
        let bootstrap = format!(
            "node: {{ id: sidecar, cluster: app, metadata: {{ OUTRIDER_LOAD_REPORT: {value} }} }}\n\
             admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}\n"
        );
        outrider::config::bootstrap::Bootstrap::parse(&bootstrap)
    };
    assert!(!parse("\"off\"").unwrap().node.load_reports);
    assert!(parse("\"on\"").unwrap().node.load_reports);
    assert!(!parse("false").unwrap().node.load_reports, "an unquoted YAML off");
    let error = parse("sometimes").unwrap_err().to_string();
    assert!(error.contains("node.metadata.OUTRIDER_LOAD_REPORT"), "{error}");
}

#[test]
fn the_cpu_source_is_node_metadata_and_a_limit_without_processes_is_refused() {
    use outrider::core::cpu_usage::CpuSource;
    let parse = |metadata: &str| {
        let bootstrap = format!(
            "node: {{ id: sidecar, cluster: app, metadata: {{ {metadata} }} }}\n\
             admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}\n"
        );
        outrider::config::bootstrap::Bootstrap::parse(&bootstrap)
    };
    assert_eq!(parse("").unwrap().node.app_cpu, CpuSource::Auto);
    assert_eq!(parse("OUTRIDER_APP_CPU: cgroup").unwrap().node.app_cpu, CpuSource::Cgroup);
    assert_eq!(parse("OUTRIDER_APP_CPU: \"off\"").unwrap().node.app_cpu, CpuSource::Off);
    assert_eq!(parse("OUTRIDER_APP_CPU: processes").unwrap().node.app_cpu, CpuSource::Processes { cpus: None });
    assert_eq!(
        parse("OUTRIDER_APP_CPU: processes, OUTRIDER_APP_CPU_LIMIT: \"1500\"").unwrap().node.app_cpu,
        CpuSource::Processes { cpus: Some(1.5) }
    );
    for (metadata, key) in [
        ("OUTRIDER_APP_CPU: sometimes", "node.metadata.OUTRIDER_APP_CPU"),
        ("OUTRIDER_APP_CPU: processes, OUTRIDER_APP_CPU_LIMIT: \"-5\"", "node.metadata.OUTRIDER_APP_CPU_LIMIT"),
        ("OUTRIDER_APP_CPU: cgroup, OUTRIDER_APP_CPU_LIMIT: \"500\"", "node.metadata.OUTRIDER_APP_CPU_LIMIT"),
        ("OUTRIDER_APP_CPU_LIMIT: \"500\"", "node.metadata.OUTRIDER_APP_CPU_LIMIT"),
    ] {
        let error = parse(metadata).unwrap_err().to_string();
        assert!(error.contains(key), "{metadata}: {error}");
    }
    // Kubernetes containers read no cgroup unless told to: theirs is the sidecar's own.
    assert_eq!(CpuSource::Auto.resolved(true), CpuSource::Off);
    assert_eq!(CpuSource::Auto.resolved(false), CpuSource::Cgroup);
    assert_eq!(CpuSource::Cgroup.resolved(true), CpuSource::Cgroup);
}

/// The `processes` source counts a real process of another user (an application running
/// as `nobody` beside a root sidecar) and not the sidecar's own: the CPU the reading
/// gains while the application spins is at least what the kernel says it spent. The
/// reading covers every process of another user on the machine, and one that exits
/// between two readings takes its time with it (as the module says), so each check has
/// three tries: a test running beside this one cannot fail it three times running.
#[test]
fn the_processes_source_reads_another_users_process_from_proc() {
    use outrider::core::cpu_usage::{CpuSource, sample};
    use std::process::{Command, Stdio};
    if let Some(why) = crate::netns::unavailable() {
        return skipped(Tool::Netns, "the_processes_source_reads_another_users_process_from_proc", &why);
    }
    let ticks = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<f64> = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime: fields 14 and 15, the 12th and 13th after the name.
        fields.get(10).copied().unwrap_or(0.0) + fields.get(11).copied().unwrap_or(0.0)
    };
    let mut application = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "sh", "-c", "while :; do :; done"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = application.id();
    let source = CpuSource::Processes { cpus: Some(0.1) };
    let mut counted = Vec::new();
    for _ in 0..3 {
        let before = sample(source).unwrap();
        let spun_before = ticks(pid);
        // Until the kernel has charged the application 30 ticks more (0.3 s of CPU), polled.
        let mut spun = spun_before;
        for _ in 0..600 {
            spun = ticks(pid);
            if spun - spun_before >= 30.0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let after = sample(source).unwrap();
        assert_eq!(after.cpus, 0.1, "over the limit given");
        assert!(spun - spun_before >= 30.0, "the application never ran: {spun_before} → {spun} ticks");
        let (gained, spent) = (after.spent - before.spent, (spun - spun_before) / 100.0);
        counted.push((gained, spent));
        if gained >= spent - 0.02 {
            break;
        }
    }
    application.kill().unwrap();
    application.wait().unwrap();
    assert!(counted.iter().any(|(gained, spent)| gained >= &(spent - 0.02)), "(read, spent) s: {counted:?}");
    // This process (root, like every test thread) is not counted: a spin of its own adds
    // nothing that the other user's processes do not.
    let own = CpuSource::Processes { cpus: None };
    let mut gained = Vec::new();
    for _ in 0..3 {
        let mine = sample(own).unwrap().spent;
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        gained.push(sample(own).unwrap().spent - mine);
    }
    assert!(gained.iter().any(|g| *g < 0.1), "the sidecar's own CPU is not the application's: {gained:?}");
}
