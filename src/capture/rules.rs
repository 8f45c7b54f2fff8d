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
/// DNS capture's chain (in `nat` and in `raw`).
pub const OUTPUT_DNS: &str = "ISTIO_OUTPUT_DNS";
/// The chains Outrider creates in `nat`, in creation order.
pub const CHAINS: [&str; 5] = [INBOUND, REDIRECT, IN_REDIRECT, OUTPUT, OUTPUT_DNS];
/// The chains DNS capture creates in `raw` (its conntrack zones).
pub const RAW_CHAINS: [&str; 2] = [OUTPUT_DNS, INBOUND];

/// The sidecar's DNS proxy port.
pub const DNS_PROXY_PORT: &str = "15053";

/// The table a rule goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Nat,
    /// Only DNS capture's conntrack zones.
    Raw,
}

/// One rule appended to a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
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
    /// appends every rule, in one transaction per table (`raw` only with DNS capture).
    pub fn restore_input(&self) -> String {
        let mut out = String::new();
        for (table, name, chains) in [(Table::Nat, "nat", &CHAINS[..]), (Table::Raw, "raw", &RAW_CHAINS[..])] {
            let rules: Vec<&Rule> = self.rules.iter().filter(|r| r.table == table).collect();
            if rules.is_empty() && table == Table::Raw {
                continue;
            }
            let _ = writeln!(out, "*{name}");
            for chain in chains {
                let _ = writeln!(out, ":{chain} - [0:0]");
            }
            for rule in rules {
                let _ = writeln!(out, "-A {} {}", rule.chain, rule.args.join(" "));
            }
            out.push_str("COMMIT\n");
        }
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
        self.add_to(Table::Nat, chain, args);
    }

    fn add_to(&mut self, table: Table, chain: &'static str, args: &[&str]) {
        self.rules.push(Rule { table, chain, args: args.iter().map(|a| (*a).to_owned()).collect() });
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
        // With DNS capture UDP goes through ISTIO_OUTPUT too (istio-iptables sends every
        // protocol there); without it only TCP, the only protocol redirected.
        let dns = options.redirect_dns;
        if dns {
            self.add("OUTPUT", &["-j", OUTPUT]);
        } else {
            self.add("OUTPUT", &["-p", "tcp", "-j", OUTPUT]);
        }
        // Port exclusions come before anything that could send the connection back in.
        for port in &options.exclude_outbound_ports {
            self.add(OUTPUT, &["-p", "tcp", "--dport", port, "-j", "RETURN"]);
            if dns {
                self.add(OUTPUT, &["-p", "udp", "--dport", port, "-j", "RETURN"]);
            }
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
            // The proxy calling the pod's own address over lo: that is inbound traffic
            // (its DNS too is its own, with DNS capture: app → DNS proxy → resolver).
            // (Only for the uid: istio-iptables leaves the gid's rule as it is.)
            let dns_and_tunnel = format!("53,{tunnel}");
            let ports: &[&str] = if dns && flag == "--uid-owner" {
                &["-m", "multiport", "!", "--dports", &dns_and_tunnel]
            } else {
                &["!", "--dport", &tunnel]
            };
            let to_inbound = [
                &["-o", "lo", "!", "-d", localhost, "-p", "tcp"],
                ports,
                &["-m", "owner", flag, id, "-j", IN_REDIRECT],
            ];
            self.add(OUTPUT, &to_inbound.concat());
            if !includes_loopback {
                // Anyone else over lo: the application talking to itself (but its DNS to a
                // resolver on loopback is captured, with DNS capture).
                if dns {
                    self.add(
                        OUTPUT,
                        &["-o", "lo", "-p", "tcp", "!", "--dport", "53", "-m", "owner", "!", flag, id, "-j", "RETURN"],
                    );
                } else {
                    self.add(OUTPUT, &["-o", "lo", "-m", "owner", "!", flag, id, "-j", "RETURN"]);
                }
            }
            // The proxy's own outbound connections.
            self.add(OUTPUT, &["-m", "owner", flag, id, "-j", "RETURN"]);
        }
        if dns {
            self.dns(options);
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

    /// DNS capture, as istio-iptables' `SetupDNSRedir`: the application's queries (the
    /// proxy's own left before this) to the pod's resolvers, or to any server, go to the DNS
    /// proxy; in `raw`, the proxy's queries to resolvers and its answers to the application
    /// are kept in separate conntrack zones, so that UDP replies are not matched to the
    /// wrong flow.
    fn dns(&mut self, options: &Options) {
        let family = self.family;
        let servers: Vec<String> = options
            .dns_servers
            .iter()
            .filter(|ip| ip.is_ipv4() == (family == Family::V4))
            .map(|ip| match family {
                Family::V4 => format!("{ip}/32"),
                Family::V6 => format!("{ip}/128"),
            })
            .collect();
        let all = options.capture_all_dns;
        self.add_to(Table::Raw, "OUTPUT", &["-j", OUTPUT_DNS]);
        if all || !servers.is_empty() {
            self.add(OUTPUT, &["-j", OUTPUT_DNS]);
        }
        for protocol in ["tcp", "udp"] {
            if all {
                let to_ports = if protocol == "udp" { "--to-port" } else { "--to-ports" };
                self.add(OUTPUT_DNS, &["-p", protocol, "--dport", "53", "-j", "REDIRECT", to_ports, DNS_PROXY_PORT]);
            }
            // istio-iptables writes `--to-port` for UDP; iptables takes either.
            let to_ports = if protocol == "udp" { "--to-port" } else { "--to-ports" };
            for server in servers.iter().filter(|_| !all) {
                let redirect =
                    ["-p", protocol, "--dport", "53", "-d", server, "-j", "REDIRECT", to_ports, DNS_PROXY_PORT];
                self.add(OUTPUT_DNS, &redirect);
            }
        }
        let owners = options.proxy_uids.iter().map(|id| ("--uid-owner", id.as_str()));
        let owners = owners.chain(options.proxy_gids.iter().map(|id| ("--gid-owner", id.as_str())));
        for (flag, id) in owners {
            let to_resolvers = ["-p", "udp", "--dport", "53", "-m", "owner", flag, id, "-j", "CT", "--zone", "1"];
            self.add_to(Table::Raw, OUTPUT_DNS, &to_resolvers);
            let answers = ["-p", "udp", "--sport", DNS_PROXY_PORT, "-m", "owner", flag, id, "-j", "CT", "--zone", "2"];
            self.add_to(Table::Raw, OUTPUT_DNS, &answers);
        }
        if all {
            self.add_to(Table::Raw, "PREROUTING", &["-j", INBOUND]);
            self.add_to(Table::Raw, OUTPUT_DNS, &["-p", "udp", "--dport", "53", "-j", "CT", "--zone", "2"]);
            self.add_to(Table::Raw, INBOUND, &["-p", "udp", "--sport", "53", "-j", "CT", "--zone", "1"]);
            return;
        }
        if !servers.is_empty() {
            self.add_to(Table::Raw, "PREROUTING", &["-j", INBOUND]);
        }
        for server in &servers {
            let queries = ["-p", "udp", "--dport", "53", "-d", server, "-j", "CT", "--zone", "2"];
            self.add_to(Table::Raw, OUTPUT_DNS, &queries);
            let replies = ["-p", "udp", "--sport", "53", "-s", server, "-j", "CT", "--zone", "1"];
            self.add_to(Table::Raw, INBOUND, &replies);
        }
    }
}
