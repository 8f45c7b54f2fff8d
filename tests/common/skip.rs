//! The one way a test says it did not run. A test whose tool is missing (Envoy, a Go peer,
//! ztunnel, the manifest validator, network namespaces, a browser) prints `SKIPPED: <what>: <why>` and returns;
//! it never passes silently. `tests/setup.sh` installs the tools and lists in `OUTRIDER_EXPECT`
//! the ones it installed: a test that skips for want of a tool the run expects fails instead,
//! so a check that could run is never lost to a wrong path.

/// A tool a test may need that a machine may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// Envoy 1.40, the other half of the differential tests (`bench/install-envoy.sh`).
    Envoy,
    /// istiod, pilot-agent, go-control-plane, grpc-go (`tests/peers/build.sh`).
    Peers,
    /// kubernetes-validate (`deploy/install-validator.sh`).
    Validator,
    /// root, iproute2 and iptables, for tests in network namespaces.
    Netns,
    /// Debian's headless Chromium, for the admin pages that draw in the browser.
    Chromium,
    /// ztunnel, built from its source (`tests/peers/ztunnel/build.sh`).
    Ztunnel,
}

impl Tool {
    /// Its name in `OUTRIDER_EXPECT`.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Envoy => "envoy",
            Tool::Peers => "peers",
            Tool::Validator => "validator",
            Tool::Netns => "netns",
            Tool::Chromium => "chromium",
            Tool::Ztunnel => "ztunnel",
        }
    }

    fn expected(self) -> bool {
        std::env::var("OUTRIDER_EXPECT").unwrap_or_default().split(',').any(|name| name.trim() == self.name())
    }
}

/// Says that `what` did not run because of `why` (the missing `tool`), or fails when this run
/// expects `tool`.
pub fn skipped(tool: Tool, what: &str, why: &str) {
    assert!(!tool.expected(), "{what} did not run ({why}), but this run expects `{}` (OUTRIDER_EXPECT)", tool.name());
    println!("SKIPPED: {what}: {why}");
}
