//! The Go peers `tests/peers/build.sh` builds (istiod, pilot-agent, go-control-plane's test
//! server, grpc-go's interop server and client, grpc-orca-backend), and ztunnel, which
//! `tests/peers/ztunnel/build.sh` builds, found where those scripts put them.
#![allow(dead_code)]

use super::skip::{Tool, skipped};
use std::path::PathBuf;

/// Where `tests/peers/build.sh` writes the binaries.
pub fn peers_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("OUTRIDER_PEERS_DIR") {
        return PathBuf::from(dir).join("bin");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("outrider/peers/bin")
}

/// The peer binary `name`, or `None` after printing that the test `test` is skipped.
pub fn peer(name: &str, test: &str) -> Option<PathBuf> {
    let path = peers_dir().join(name);
    if path.is_file() {
        Some(path)
    } else {
        skipped(Tool::Peers, test, &format!("{} not built (tests/peers/build.sh)", path.display()));
        None
    }
}

/// The directory where `tests/peers/ztunnel/build.sh` put ztunnel (`ztunnel`) and the test
/// root it issues certificates from (`root-cert.pem`, `ca-key.pem`), or `None` after
/// printing that the test `test` is skipped.
pub fn ztunnel(test: &str) -> Option<PathBuf> {
    let dir = peers_dir().parent().map(|peers| peers.join("ztunnel")).unwrap_or_default();
    if dir.join("ztunnel").is_file() && dir.join("ca-key.pem").is_file() {
        Some(dir)
    } else {
        skipped(Tool::Ztunnel, test, &format!("{} not built (tests/peers/ztunnel/build.sh)", dir.display()));
        None
    }
}
