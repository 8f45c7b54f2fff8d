//! `outrider proxy <type> [flags]`: pilot-agent's own command line (`pilot-agent proxy
//! waypoint --domain … --serviceCluster …`), which Istio's gateway and waypoint templates
//! give the proxy container. An Outrider image set as the proxy image then runs what those
//! templates render, unchanged: one process doing the agent's job and the proxy's.
//!
//! Flags that only name things Outrider takes from the environment are accepted; a flag
//! this file does not know is refused, so nothing a template asks for is silently dropped.

use super::bootstrap::ProxyType;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyCommand {
    pub proxy_type: ProxyType,
    /// The cluster's DNS domain, from `--domain <ns>.svc.<domain>`.
    pub dns_domain: Option<String>,
    /// `--proxyLogLevel`: Envoy's name of a level (`warning`), checked where the log starts.
    pub log_level: Option<String>,
    pub log_json: bool,
    pub concurrency: Option<usize>,
}

/// Flags that take a value and change nothing here: `--serviceCluster` (Istio's default
/// service cluster, which the bootstrap derives from the pod's labels as pilot-agent does),
/// `--log_output_level` (the agent's own Go logger: Outrider has one log),
/// `--proxyComponentLogLevel` (Envoy's per-logger levels, here one `tracing` filter).
const NAMING_FLAGS: &[&str] = &["--serviceCluster", "--log_output_level", "--proxyComponentLogLevel"];

/// Parses `args` (what follows `proxy`).
pub fn parse(args: &[String]) -> Result<ProxyCommand, String> {
    let (kind, rest) = args.split_first().ok_or("`proxy` needs a proxy type: sidecar or waypoint")?;
    let proxy_type = ProxyType::parse(kind).ok_or_else(|| format!("proxy type {kind:?} is not sidecar or waypoint"))?;
    let mut command =
        ProxyCommand { proxy_type, dns_domain: None, log_level: None, log_json: false, concurrency: None };
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        // Go's flag package takes `--flag=value` and `--flag value` alike.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        if flag == "--log_as_json" {
            command.log_json = true;
            continue;
        }
        let mut value =
            || inline.clone().or_else(|| rest.next().cloned()).ok_or_else(|| format!("{flag} needs a value"));
        match flag {
            "--domain" => {
                let domain = value()?;
                // `<namespace>.svc.<cluster domain>`
                let cluster = domain.split_once(".svc.").map(|(_, d)| d.to_owned());
                command.dns_domain =
                    Some(cluster.ok_or_else(|| format!("--domain {domain:?} is not <ns>.svc.<domain>"))?);
            }
            "--proxyLogLevel" => {
                command.log_level = Some(value()?);
            }
            "--concurrency" => {
                let text = value()?;
                let n = text.parse().map_err(|_| format!("--concurrency {text:?} is not a number"))?;
                command.concurrency = (n > 0).then_some(n);
            }
            _ if NAMING_FLAGS.contains(&flag) => {
                value()?;
            }
            _ => return Err(format!("{flag}: a pilot-agent flag Outrider does not implement")),
        }
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn istios_waypoint_template_command_line_parses() {
        // As `files/waypoint.yaml` renders it, the variables expanded by the kubelet.
        let command = parse(&args(
            "waypoint --domain shop.svc.cluster.local --serviceCluster waypoint.shop --proxyLogLevel warning \
             --proxyComponentLogLevel misc:error --log_output_level default:info",
        ))
        .unwrap();
        assert_eq!(command.proxy_type, ProxyType::Waypoint);
        assert_eq!(command.dns_domain.as_deref(), Some("cluster.local"));
        assert_eq!(command.log_level.as_deref(), Some("warning"));
        assert!(!command.log_json);
        let command = parse(&args("sidecar --log_as_json --concurrency=2")).unwrap();
        assert_eq!((command.proxy_type, command.log_json, command.concurrency), (ProxyType::Sidecar, true, Some(2)));
    }

    #[test]
    fn what_it_does_not_implement_is_refused() {
        assert!(parse(&args("router")).unwrap_err().contains("not sidecar or waypoint"));
        assert!(parse(&args("waypoint --outlierLogPath=/dev/stdout")).unwrap_err().contains("--outlierLogPath"));
        assert!(parse(&args("waypoint --domain")).unwrap_err().contains("needs a value"));
        assert!(parse(&args("waypoint --domain cluster.local")).is_err());
        assert!(parse(&[]).is_err());
    }
}
