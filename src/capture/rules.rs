//! The capture rules as data: what `outrider capture` installs in the `nat` table, in the
//! order Istio's `istio-iptables` installs them (REDIRECT mode), for one address family.
//!
//! ```text
//! PREROUTING ─▶ ISTIO_INBOUND ─▶ (tunnel and excluded ports: RETURN) ─▶ ISTIO_IN_REDIRECT ─▶ :15006
//! OUTPUT ─▶ ISTIO_OUTPUT ─▶ excluded ports, the proxy's own traffic, localhost, excluded
//!                           CIDRs: RETURN; included CIDRs/ports ─▶ ISTIO_REDIRECT ─▶ :15001
//! ```
//!
//! The proxy's own connections (its uid or gid) leave untouched, except those to the pod's
//! own address over `lo`, which go to the inbound port (an application calling itself
//! through a service address: app → outbound proxy → inbound proxy → app). Connections
//! from 127.0.0.6 (`::6`), the source the inbound passthrough clusters bind, are never
//! captured, so that the proxy's delivery to the application is not captured again.

use std::fmt::Write;

use super::options::{Family, Options, PortList};

pub const INBOUND: &str = "ISTIO_INBOUND";
pub const REDIRECT: &str = "ISTIO_REDIRECT";
pub const IN_REDIRECT: &str = "ISTIO_IN_REDIRECT";
pub const OUTPUT: &str = "ISTIO_OUTPUT";
/// The chains Outrider creates, in creation order.
pub const CHAINS: [&str; 4] = [INBOUND, REDIRECT, IN_REDIRECT, OUTPUT];

/// One rule appended to a chain of the `nat` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: &'static str,
    pub args: Vec<String>,
}

/// Every rule of one family, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    pub family: Family,
    pub rules: Vec<Rule>,
}

impl Ruleset {
    /// The rules `options` ask for in `family`.
    pub fn build(options: &Options, family: Family) -> Self {
        let mut rules = Rules { family, rules: Vec::new() };
        rules.interfaces(options);
        rules.redirect_chains(options);
        rules.inbound(options);
        rules.output(options);
        Self { family, rules: rules.rules }
    }

    /// `iptables-restore --noflush` input: declares (and so empties) the chains, then
    /// appends every rule, in one transaction.
    pub fn restore_input(&self) -> String {
        let mut out = String::from("*nat\n");
        for chain in CHAINS {
            let _ = writeln!(out, ":{chain} - [0:0]");
        }
        for rule in &self.rules {
            let _ = writeln!(out, "-A {} {}", rule.chain, rule.args.join(" "));
        }
        out.push_str("COMMIT\n");
        out
    }
}

/// Builds the rule list of one family.
struct Rules {
    family: Family,
    rules: Vec<Rule>,
}

impl Rules {
    fn add(&mut self, chain: &'static str, args: &[&str]) {
        self.rules.push(Rule { chain, args: args.iter().map(|a| (*a).to_owned()).collect() });
    }

    fn localhost(&self) -> &'static str {
        match self.family {
            Family::V4 => "127.0.0.1/32",
            Family::V6 => "::1/128",
        }
    }

    /// The source address inbound passthrough connections are made from.
    fn inbound_source(&self) -> &'static str {
        match self.family {
            Family::V4 => "127.0.0.6/32",
            Family::V6 => "::6/128",
        }
    }

    /// Interfaces whose traffic is never captured, either way.
    fn interfaces(&mut self, options: &Options) {
        for interface in &options.exclude_interfaces {
            self.add("PREROUTING", &["-i", interface, "-j", "RETURN"]);
            self.add("OUTPUT", &["-o", interface, "-j", "RETURN"]);
        }
    }

    fn redirect_chains(&mut self, options: &Options) {
        let tunnel = options.inbound_tunnel_port.to_string();
        self.add(INBOUND, &["-p", "tcp", "--dport", &tunnel, "-j", "RETURN"]);
        let outbound = options.proxy_port.to_string();
        self.add(REDIRECT, &["-p", "tcp", "-j", "REDIRECT", "--to-ports", &outbound]);
        let inbound = options.inbound_capture_port.to_string();
        self.add(IN_REDIRECT, &["-p", "tcp", "-j", "REDIRECT", "--to-ports", &inbound]);
    }

    /// Inbound: every port but the excluded ones (`*`), or only the listed ones.
    fn inbound(&mut self, options: &Options) {
        match &options.inbound_ports {
            PortList::Ports(ports) if ports.is_empty() => {}
            PortList::All => {
                self.add("PREROUTING", &["-p", "tcp", "-j", INBOUND]);
                for port in &options.exclude_inbound_ports {
                    self.add(INBOUND, &["-p", "tcp", "--dport", port, "-j", "RETURN"]);
                }
                self.add(INBOUND, &["-p", "tcp", "-j", IN_REDIRECT]);
            }
            PortList::Ports(ports) => {
                self.add("PREROUTING", &["-p", "tcp", "-j", INBOUND]);
                for port in ports {
                    self.add(INBOUND, &["-p", "tcp", "--dport", port, "-j", IN_REDIRECT]);
                }
            }
        }
    }

    fn output(&mut self, options: &Options) {
        self.add("OUTPUT", &["-p", "tcp", "-j", OUTPUT]);
        // Port exclusions come before anything that could send the connection back in.
        for port in &options.exclude_outbound_ports {
            self.add(OUTPUT, &["-p", "tcp", "--dport", port, "-j", "RETURN"]);
        }
        let (localhost, source) = (self.localhost(), self.inbound_source());
        self.add(OUTPUT, &["-o", "lo", "-s", source, "-j", "RETURN"]);
        let tunnel = options.inbound_tunnel_port.to_string();
        // An explicitly included loopback range means the application's own calls over
        // `lo` are captured too, so the "not the proxy over lo" shortcut is left out.
        let includes_loopback = options.outbound_ranges.iter().any(|c| c.family() == self.family && c.is_loopback());
        let owners = options.proxy_uids.iter().map(|id| ("--uid-owner", id.as_str()));
        let owners = owners.chain(options.proxy_gids.iter().map(|id| ("--gid-owner", id.as_str())));
        for (flag, id) in owners {
            // The proxy calling the pod's own address over lo: that is inbound traffic.
            let to_inbound = [
                "-o",
                "lo",
                "!",
                "-d",
                localhost,
                "-p",
                "tcp",
                "!",
                "--dport",
                &tunnel,
                "-m",
                "owner",
                flag,
                id,
                "-j",
                IN_REDIRECT,
            ];
            self.add(OUTPUT, &to_inbound);
            if !includes_loopback {
                // Anyone else over lo: the application talking to itself.
                self.add(OUTPUT, &["-o", "lo", "-m", "owner", "!", flag, id, "-j", "RETURN"]);
            }
            // The proxy's own outbound connections.
            self.add(OUTPUT, &["-m", "owner", flag, id, "-j", "RETURN"]);
        }
        // Localhost: sidecar-aware applications and container-to-container traffic.
        self.add(OUTPUT, &["-d", localhost, "-j", "RETURN"]);
        let family = self.family;
        for cidr in options.exclude_outbound_ranges.iter().filter(|c| c.family() == family) {
            self.add(OUTPUT, &["-d", &cidr.to_string(), "-j", "RETURN"]);
        }
        for port in &options.outbound_ports {
            self.add(OUTPUT, &["-p", "tcp", "--dport", port, "-j", REDIRECT]);
        }
        if options.all_outbound_ranges {
            self.add(OUTPUT, &["-j", REDIRECT]);
        } else {
            for cidr in options.outbound_ranges.iter().filter(|c| c.family() == family) {
                self.add(OUTPUT, &["-d", &cidr.to_string(), "-j", REDIRECT]);
            }
        }
    }
}
