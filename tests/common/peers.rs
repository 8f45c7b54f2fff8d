//! The Go peers `tests/peers/build.sh` builds (istiod, pilot-agent, go-control-plane's test
//! server, grpc-go's interop server and client, grpc-orca-backend), found where that script
//! puts them.
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
