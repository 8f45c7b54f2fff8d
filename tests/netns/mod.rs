//! A two-host network made of network namespaces, for the capture tests: a "client" and a
//! "pod" namespace joined by a veth pair, IPv4 and IPv6 addresses from the benchmarking
//! and documentation ranges (never routed anywhere), plain TCP/HTTP servers that answer
//! with their name and the peer they saw, and a client, each running inside a namespace.
//!
//! Needs root, iproute2 and iptables. Everything it creates has names unique to the test
//! process and is deleted when the [`Lab`] drops, failed test or not.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod istio;
pub mod kubelet;
pub mod kubernetes;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const CLIENT_V4: &str = "198.18.0.1";
pub const POD_V4: &str = "198.18.0.2";
pub const CLIENT_V6: &str = "2001:db8:ca::1";
pub const POD_V6: &str = "2001:db8:ca::2";

/// Why the lab cannot be built here, if it cannot.
pub fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Some("not running as root".into());
    }
    for tool in ["ip", "iptables", "ip6tables", "iptables-restore", "setpriv"] {
        let found = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
        if found.is_err() {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// Runs a command, panicking with its output when it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The namespaces, and the processes started in them (stopped before the namespaces go).
pub struct Lab {
    pub client: String,
    pub pod: String,
    processes: Vec<(Child, Option<std::path::PathBuf>)>,
}

impl Lab {
    /// Creates both namespaces, the veth pair between them, and their addresses.
    pub fn new() -> Self {
        let id = std::process::id();
        let lab = Self { client: format!("odst-{id}-c"), pod: format!("odst-{id}-p"), processes: Vec::new() };
        sh("ip", &["netns", "add", &lab.client]);
        sh("ip", &["netns", "add", &lab.pod]);
        let (client_if, pod_if) = (format!("oc{id}"), format!("op{id}"));
        // Both ends are created inside their namespaces: nothing appears on the host.
        sh(
            "ip",
            &[
                "link",
                "add",
                &client_if,
                "netns",
                &lab.client,
                "type",
                "veth",
                "peer",
                "name",
                &pod_if,
                "netns",
                &lab.pod,
            ],
        );
        for (ns, dev, v4, v6) in [(&lab.client, &client_if, CLIENT_V4, CLIENT_V6), (&lab.pod, &pod_if, POD_V4, POD_V6)]
        {
            sh("ip", &["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev]);
            // nodad: usable at once, no duplicate address detection delay.
            sh("ip", &["-n", ns, "-6", "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"]);
            sh("ip", &["-n", ns, "link", "set", "lo", "up"]);
            sh("ip", &["-n", ns, "link", "set", dev, "up"]);
        }
        lab
    }

    /// Runs `program args` inside `ns` to completion; its stdout.
    pub fn exec(&self, ns: &str, program: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", ns, program];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    /// Starts `program args` inside `ns` as `uid`, logging to `log`; stopped on drop.
    pub fn spawn_as(&mut self, ns: &str, uid: u32, program: &str, args: &[&str], log: std::path::PathBuf) {
        let (uid, file) = (uid.to_string(), std::fs::File::create(&log).unwrap());
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "setpriv", "--reuid", &uid, "--regid", &uid, "--clear-groups", program])
            .args(args)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        self.processes.push((child, Some(log)));
    }

    /// Starts `program args` inside `ns` as root with `env` added to its environment, logging
    /// to `log`; stopped on drop.
    pub fn spawn_with(
        &mut self,
        ns: &str,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        log: std::path::PathBuf,
    ) {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        self.processes.push((child, Some(log)));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (child, log) in &mut self.processes {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking()
                && let Some(log) = log.as_ref()
            {
                eprintln!("--- {}:\n{}", log.display(), std::fs::read_to_string(log).unwrap_or_default());
            }
        }
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for ns in [&self.pod, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Outrider's binary and bootstrap in a directory uid 1337 can read (Outrider runs as the
/// proxy user, as in Istio), and where its log goes.
pub struct Files {
    dir: tempfile::TempDir,
    pub binary: String,
}

impl Files {
    pub fn new(bootstrap: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let binary = dir.path().join("outrider");
        // OUTRIDER_BIN: a copy of the binary to test, for target directories shared by
        // builds of several checkouts, where the built binary can be replaced at any time.
        let built = std::env::var("OUTRIDER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outrider").to_owned());
        std::fs::copy(built, &binary).unwrap();
        std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("bootstrap.yaml"), bootstrap).unwrap();
        Self { binary: binary.to_str().unwrap().to_owned(), dir }
    }

    pub fn config(&self) -> String {
        self.dir.path().join("bootstrap.yaml").to_str().unwrap().to_owned()
    }

    pub fn log(&self) -> std::path::PathBuf {
        self.dir.path().join("outrider.log")
    }

    /// Writes `contents` to `name` beside the bootstrap; its path.
    pub fn write(&self, name: &str, contents: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// The path of `name` beside the bootstrap.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

/// Runs `f` on a thread inside network namespace `ns`: sockets it creates belong there.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// An HTTP/1.1 server in `ns` on `address` that answers every request with
/// `<name> peer=<the peer address it saw>`, one connection at a time, for the test's life.
pub fn serve(ns: &str, address: &str, name: &'static str) {
    let address: SocketAddr = address.parse().unwrap();
    let listener = in_netns(ns, move || bind(address));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let peer = stream.peer_addr().map(|p| p.to_string()).unwrap_or_default();
            let _ = read_head(&mut stream);
            let body = format!("{name} peer={peer}");
            let response =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(response.as_bytes());
        }
    });
}

/// A listening socket; IPv6 ones IPv6-only, so IPv4 and IPv6 servers can share a port.
fn bind(address: SocketAddr) -> TcpListener {
    let socket = socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).unwrap();
    if address.is_ipv6() {
        socket.set_only_v6(true).unwrap();
    }
    socket.set_reuse_address(true).unwrap();
    socket.bind(&address.into()).unwrap();
    socket.listen(128).unwrap();
    socket.into()
}

fn read_head(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        head.push(byte[0]);
    }
    Ok(())
}

/// What a client saw.
#[derive(Debug)]
pub struct Reply {
    /// The client socket's own address.
    pub local: SocketAddr,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The peer address the server reported.
    pub fn peer(&self) -> SocketAddr {
        self.body.split("peer=").nth(1).and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{self:?}"))
    }
}

/// One `GET /` with `Host: host` to `target` from inside `ns`, read to the end.
pub fn get(ns: &str, target: &str, host: &'static str) -> std::io::Result<Reply> {
    get_path(ns, target, host, "/")
}

/// [`get`] of `path`.
pub fn get_path(ns: &str, target: &str, host: &'static str, path: &'static str) -> std::io::Result<Reply> {
    let target: SocketAddr = target.parse().unwrap();
    in_netns(ns, move || {
        let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        let local = stream.local_addr()?;
        stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
        let headers =
            lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())).collect();
        Ok(Reply { local, status, headers, body: body.to_owned() })
    })
}

/// Waits until something accepts connections on `target` inside `ns` (polled: Outrider
/// runs there as a process of its own).
pub fn wait_for_listener(ns: &str, target: &str) {
    let target: SocketAddr = target.parse().unwrap();
    crate::common::wait::blocking(&format!("something to listen on {target} in {ns}"), || {
        in_netns(ns, move || TcpStream::connect_timeout(&target, Duration::from_secs(1)).is_ok())
    });
}

/// Latencies of `requests` sequential requests to `target` from inside `ns`, each on a new
/// connection (capture costs per connection: NAT, SO_ORIGINAL_DST, the hand-off).
pub fn time_requests(ns: &str, target: &str, requests: usize) -> Vec<Duration> {
    let target: SocketAddr = target.parse().unwrap();
    in_netns(ns, move || {
        (0..requests)
            .map(|_| {
                let started = std::time::Instant::now();
                let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5)).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                stream.write_all(b"GET / HTTP/1.1\r\nhost: remote\r\nconnection: close\r\n\r\n").unwrap();
                let mut raw = Vec::new();
                stream.read_to_end(&mut raw).unwrap();
                assert!(raw.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&raw));
                started.elapsed()
            })
            .collect()
    })
}
