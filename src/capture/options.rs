//! `outrider capture` options: the command line (Istio's `istio-iptables` flags, long and
//! short, so an injector's init container arguments work unchanged) and their validated
//! form. Every value ends up as an iptables argument, so each is checked here: a bad one
//! is an error naming the flag, never a half-applied rule set.

use std::fmt;
use std::net::IpAddr;

use super::error::CaptureError;

/// The command line of `outrider capture`.
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// Port outbound TCP is redirected to (the `use_original_dst` listener).
    #[arg(short = 'p', long, default_value_t = 15001)]
    pub proxy_port: u16,
    /// Port inbound TCP is redirected to (the listener with the original_dst filter).
    #[arg(short = 'z', long, default_value_t = 15006)]
    pub inbound_capture_port: u16,
    /// Inbound port never captured (Istio's HBONE tunnel port).
    #[arg(long, default_value_t = 15008)]
    pub inbound_tunnel_port: u16,
    /// User ids whose traffic is the proxy's own, comma-separated.
    #[arg(short = 'u', long, default_value = "1337")]
    pub proxy_uid: String,
    /// Group ids whose traffic is the proxy's own, comma-separated.
    #[arg(short = 'g', long, default_value = "1337")]
    pub proxy_gid: String,
    /// Interception mode; only REDIRECT (NAT) is supported.
    #[arg(short = 'm', long, default_value = "REDIRECT")]
    pub mode: String,
    /// Inbound ports to capture: `*` for all, or a comma-separated list (empty: none).
    #[arg(short = 'b', long, default_value = "*")]
    pub inbound_ports: String,
    /// Inbound ports never captured when all are (`-b '*'`): the proxy's agent, health and
    /// telemetry ports.
    #[arg(short = 'd', long, default_value = "15020,15021,15090")]
    pub exclude_inbound_ports: String,
    /// Outbound destinations to capture: `*` for all, or comma-separated CIDRs.
    #[arg(short = 'i', long, default_value = "*")]
    pub outbound_ranges: String,
    /// Outbound destinations never captured, comma-separated CIDRs.
    #[arg(short = 'x', long, default_value = "")]
    pub exclude_outbound_ranges: String,
    /// Outbound ports always captured, whatever the destination.
    #[arg(short = 'q', long, default_value = "")]
    pub outbound_ports: String,
    /// Outbound ports never captured.
    #[arg(short = 'o', long, default_value = "")]
    pub exclude_outbound_ports: String,
    /// Interfaces whose traffic is never captured, comma-separated.
    #[arg(short = 'c', long, default_value = "")]
    pub exclude_interfaces: String,
    /// Also install the rules with ip6tables (and add ::6 to lo, the inbound source).
    #[arg(long)]
    pub ipv6: bool,
    /// Send the application's DNS to the sidecar's DNS proxy on 15053 (istio-iptables'
    /// `--redirect-dns`, set by Istio's injector with `ISTIO_META_DNS_CAPTURE`): queries to
    /// the pod's resolvers (`--dns-servers`), or to any server with `--capture-all-dns`.
    #[arg(long)]
    pub redirect_dns: bool,
    /// With `--redirect-dns`: every DNS query, whatever server it is sent to.
    #[arg(long)]
    pub capture_all_dns: bool,
    /// With `--redirect-dns`: the pod's resolvers; default: the nameservers of
    /// /etc/resolv.conf, as istio-iptables reads them.
    #[arg(long)]
    pub dns_servers: Option<String>,
    /// Remove the rules instead of installing them.
    #[arg(long)]
    pub clean: bool,
    /// Print the iptables-restore input instead of applying it.
    #[arg(long)]
    pub dry_run: bool,
}

/// An address family, and the tools that manage its tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn iptables(self) -> &'static str {
        match self {
            Self::V4 => "iptables",
            Self::V6 => "ip6tables",
        }
    }
}

/// Which inbound ports are captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortList {
    All,
    Ports(Vec<String>),
}

/// An IP prefix as given (iptables masks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub ip: IpAddr,
    pub prefix_len: u8,
}

impl Cidr {
    pub fn family(&self) -> Family {
        if self.ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    pub fn is_loopback(&self) -> bool {
        self.ip.is_loopback()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix_len)
    }
}

/// The validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub proxy_port: u16,
    pub inbound_capture_port: u16,
    pub inbound_tunnel_port: u16,
    pub proxy_uids: Vec<String>,
    pub proxy_gids: Vec<String>,
    pub inbound_ports: PortList,
    pub exclude_inbound_ports: Vec<String>,
    /// `-i '*'`: every outbound destination not excluded.
    pub all_outbound_ranges: bool,
    pub outbound_ranges: Vec<Cidr>,
    pub exclude_outbound_ranges: Vec<Cidr>,
    pub outbound_ports: Vec<String>,
    pub exclude_outbound_ports: Vec<String>,
    pub exclude_interfaces: Vec<String>,
    pub ipv6: bool,
    /// `--redirect-dns`: DNS to the sidecar's DNS proxy.
    pub redirect_dns: bool,
    /// `--capture-all-dns`.
    pub capture_all_dns: bool,
    /// The resolvers whose queries are captured (without `--capture-all-dns`).
    pub dns_servers: Vec<IpAddr>,
}

impl Options {
    pub fn from_args(args: &CaptureArgs) -> Result<Self, CaptureError> {
        if !args.mode.eq_ignore_ascii_case("REDIRECT") {
            return Err(invalid("--mode", &args.mode, "only REDIRECT is supported"));
        }
        let outbound_all = args.outbound_ranges.trim() == "*";
        // As istio-iptables: the flag, or the environment Istio's injector gives the init
        // container (ProxyConfig's `proxyMetadata`).
        let redirect_dns = args.redirect_dns
            || ["REDIRECT_DNS", "ISTIO_META_DNS_CAPTURE"].iter().any(|k| std::env::var(k).is_ok_and(|v| v == "true"));
        Ok(Self {
            proxy_port: args.proxy_port,
            inbound_capture_port: args.inbound_capture_port,
            inbound_tunnel_port: args.inbound_tunnel_port,
            proxy_uids: owners("--proxy-uid", &args.proxy_uid)?,
            proxy_gids: owners("--proxy-gid", &args.proxy_gid)?,
            inbound_ports: if args.inbound_ports.trim() == "*" {
                PortList::All
            } else {
                PortList::Ports(ports("--inbound-ports", &args.inbound_ports)?)
            },
            exclude_inbound_ports: ports("--exclude-inbound-ports", &args.exclude_inbound_ports)?,
            all_outbound_ranges: outbound_all,
            outbound_ranges: if outbound_all { Vec::new() } else { cidrs("--outbound-ranges", &args.outbound_ranges)? },
            exclude_outbound_ranges: cidrs("--exclude-outbound-ranges", &args.exclude_outbound_ranges)?,
            outbound_ports: ports("--outbound-ports", &args.outbound_ports)?,
            exclude_outbound_ports: ports("--exclude-outbound-ports", &args.exclude_outbound_ports)?,
            exclude_interfaces: items(&args.exclude_interfaces)
                .map(|name| interface("--exclude-interfaces", name))
                .collect::<Result<_, _>>()?,
            ipv6: args.ipv6,
            redirect_dns,
            capture_all_dns: args.capture_all_dns,
            dns_servers: match (&args.dns_servers, redirect_dns && !args.capture_all_dns) {
                (Some(list), _) => items(list)
                    .map(|item| item.parse().map_err(|_| invalid("--dns-servers", item, "not an IP address")))
                    .collect::<Result<_, _>>()?,
                (None, true) => resolv_conf_servers(),
                (None, false) => Vec::new(),
            },
        })
    }

    /// The families to install rules for.
    pub fn families(&self) -> Vec<Family> {
        if self.ipv6 { vec![Family::V4, Family::V6] } else { vec![Family::V4] }
    }
}

fn invalid(flag: &str, value: &str, why: &str) -> CaptureError {
    CaptureError::Invalid { flag: flag.to_owned(), value: value.to_owned(), why: why.to_owned() }
}

/// Comma-separated items, blanks dropped.
/// The nameservers of /etc/resolv.conf (none when it cannot be read).
fn resolv_conf_servers() -> Vec<IpAddr> {
    let Ok(text) = std::fs::read("/etc/resolv.conf") else { return Vec::new() };
    resolv_conf::Config::parse_with_errors(&text).0.nameservers.iter().map(Into::into).collect()
}

fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Ports, each `N` or a range `N:M`, as iptables writes them.
fn ports(flag: &str, list: &str) -> Result<Vec<String>, CaptureError> {
    items(list)
        .map(|item| {
            let parse = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0);
            let valid = match item.split_once(':') {
                Some((low, high)) => matches!((parse(low), parse(high)), (Some(l), Some(h)) if l <= h),
                None => parse(item).is_some(),
            };
            if valid { Ok(item.to_owned()) } else { Err(invalid(flag, item, "not a port (1-65535) or range N:M")) }
        })
        .collect()
}

fn cidrs(flag: &str, list: &str) -> Result<Vec<Cidr>, CaptureError> {
    items(list)
        .map(|item| {
            let (ip, len) = item.split_once('/').unwrap_or((item, ""));
            let ip: IpAddr = ip.parse().map_err(|_| invalid(flag, item, "not an IP address prefix"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let prefix_len = if len.is_empty() { Some(max) } else { len.parse::<u8>().ok().filter(|l| *l <= max) };
            let prefix_len = prefix_len.ok_or_else(|| invalid(flag, item, "bad prefix length"))?;
            Ok(Cidr { ip, prefix_len })
        })
        .collect()
}

/// User or group ids (or names, which iptables resolves).
fn owners(flag: &str, list: &str) -> Result<Vec<String>, CaptureError> {
    items(list)
        .map(|item| {
            let valid = item.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if valid { Ok(item.to_owned()) } else { Err(invalid(flag, item, "not a user or group")) }
        })
        .collect()
}

fn interface(flag: &str, name: &str) -> Result<String, CaptureError> {
    let valid =
        name.len() <= 15 && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | '+'));
    if valid { Ok(name.to_owned()) } else { Err(invalid(flag, name, "not an interface name")) }
}
