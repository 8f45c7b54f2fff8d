//! The capture rules as Istio's injector asks for them, and the options that change them.

use clap::Parser;

use super::options::{CaptureArgs, Family, Options};
use super::rules::Table;
use super::{CaptureError, Ruleset, clean};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CaptureArgs,
}

fn options(flags: &[&str]) -> Result<Options, CaptureError> {
    let cli = Cli::try_parse_from(std::iter::once("capture").chain(flags.iter().copied())).unwrap();
    Options::from_args(&cli.args)
}

fn lines(flags: &[&str], family: Family) -> Vec<String> {
    let rules = Ruleset::build(&options(flags).unwrap(), family);
    rules.rules.iter().map(|r| format!("-A {} {}", r.chain, r.args.join(" "))).collect()
}

/// The arguments Istio's sidecar injector gives its init container.
const ISTIO_INIT: &[&str] = &[
    "-p",
    "15001",
    "-z",
    "15006",
    "-u",
    "1337",
    "-m",
    "REDIRECT",
    "-i",
    "*",
    "-x",
    "",
    "-b",
    "*",
    "-d",
    "15090,15021,15020",
];

#[test]
fn istio_init_arguments_give_istios_rules() {
    assert_eq!(
        lines(ISTIO_INIT, Family::V4),
        [
            "-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN",
            "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
            "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
            "-A PREROUTING -p tcp -j ISTIO_INBOUND",
            "-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN",
            "-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN",
            "-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN",
            "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
            "-A OUTPUT -p tcp -j ISTIO_OUTPUT",
            "-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN",
            "-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT",
            "-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN",
            "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
            "-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT",
            "-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN",
            "-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN",
            "-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN",
            "-A ISTIO_OUTPUT -j ISTIO_REDIRECT",
        ]
    );
}

#[test]
fn ipv6_rules_use_ipv6_loopback_and_inbound_source() {
    let v6 = lines(&["--ipv6"], Family::V6);
    assert!(v6.contains(&"-A ISTIO_OUTPUT -o lo -s ::6/128 -j RETURN".to_owned()));
    assert!(v6.contains(&"-A ISTIO_OUTPUT -d ::1/128 -j RETURN".to_owned()));
    assert!(v6.iter().all(|l| !l.contains("127.0.0.")));
    assert_eq!(options(&["--ipv6"]).unwrap().families(), [Family::V4, Family::V6]);
    assert_eq!(options(&[]).unwrap().families(), [Family::V4]);
}

#[test]
fn cidrs_split_by_family_and_exclusions_come_before_inclusions() {
    let flags = ["-i", "10.0.0.0/8,2001:db8::/32", "-x", "10.1.0.0/16,2001:db8:1::/48"];
    let v4 = lines(&flags, Family::V4);
    let tail: Vec<&str> = v4.iter().rev().take(3).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN",
            "-A ISTIO_OUTPUT -d 10.1.0.0/16 -j RETURN",
            "-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT"
        ]
    );
    let v6 = lines(&flags, Family::V6);
    assert_eq!(v6.last().unwrap(), "-A ISTIO_OUTPUT -d 2001:db8::/32 -j ISTIO_REDIRECT");
    assert!(v6.contains(&"-A ISTIO_OUTPUT -d 2001:db8:1::/48 -j RETURN".to_owned()));
    // Nothing included: no catch-all redirect.
    assert!(lines(&["-i", ""], Family::V4).iter().all(|l| !l.ends_with("-j ISTIO_REDIRECT")));
}

#[test]
fn port_lists_and_interfaces() {
    let v4 =
        lines(&["-b", "8080,9000:9100", "-o", "22", "-q", "3306", "-c", "eth9", "-u", "1337", "-g", ""], Family::V4);
    assert_eq!(v4[0], "-A PREROUTING -i eth9 -j RETURN");
    assert_eq!(v4[1], "-A OUTPUT -o eth9 -j RETURN");
    assert!(v4.contains(&"-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT".to_owned()));
    assert!(v4.contains(&"-A ISTIO_INBOUND -p tcp --dport 9000:9100 -j ISTIO_IN_REDIRECT".to_owned()));
    assert!(!v4.iter().any(|l| l == "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"));
    let output_start = v4.iter().position(|l| l == "-A OUTPUT -p tcp -j ISTIO_OUTPUT").unwrap();
    assert_eq!(v4[output_start + 1], "-A ISTIO_OUTPUT -p tcp --dport 22 -j RETURN", "port exclusions first");
    assert!(v4.contains(&"-A ISTIO_OUTPUT -p tcp --dport 3306 -j ISTIO_REDIRECT".to_owned()));
    assert!(!v4.iter().any(|l| l.contains("--gid-owner")));
    // No inbound ports: no PREROUTING jump at all.
    assert!(!lines(&["-b", ""], Family::V4).iter().any(|l| l.starts_with("-A PREROUTING")));
}

#[test]
fn an_included_loopback_range_captures_the_applications_own_loopback_calls() {
    let v4 = lines(&["-i", "127.0.0.0/8"], Family::V4);
    assert!(!v4.iter().any(|l| l.contains("-o lo -m owner ! --uid-owner")));
}

#[test]
fn bad_values_are_refused_with_the_flag() {
    let error = |flags: &[&str]| options(flags).unwrap_err().to_string();
    assert!(error(&["-b", "80,http"]).starts_with("--inbound-ports \"http\""));
    assert!(error(&["-d", "0"]).starts_with("--exclude-inbound-ports"));
    assert!(error(&["-x", "10.0.0.0/33"]).starts_with("--exclude-outbound-ranges"));
    assert!(error(&["-i", "10.0.0.0/8,nope"]).starts_with("--outbound-ranges"));
    assert!(error(&["-o", "9:1"]).starts_with("--exclude-outbound-ports"));
    assert!(error(&["-u", "1337 -j ACCEPT"]).starts_with("--proxy-uid"));
    assert!(error(&["-m", "TPROXY"]).starts_with("--mode"));
    assert!(error(&["-c", "a-very-long-interface-name"]).starts_with("--exclude-interfaces"));
}

#[test]
fn restore_input_declares_the_chains_once() {
    let input = Ruleset::build(&options(&[]).unwrap(), Family::V4).restore_input();
    assert!(input.starts_with("*nat\n:ISTIO_INBOUND - [0:0]\n:ISTIO_REDIRECT - [0:0]\n"));
    assert!(input.ends_with("-A ISTIO_OUTPUT -j ISTIO_REDIRECT\nCOMMIT\n"));
}

#[test]
fn clean_removes_jumps_interfaces_and_chains_only() {
    let saved = "\
# Generated by iptables-save
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ISTIO_INBOUND - [0:0]
:ISTIO_OUTPUT - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -i eth9 -j RETURN
-A PREROUTING -i eth1 -j RETURN
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
*filter
:ISTIO_OUTPUT - [0:0]
-A OUTPUT -j ISTIO_OUTPUT
COMMIT
";
    let commands: Vec<String> = clean::commands(saved, &["eth9".to_owned()]).iter().map(|c| c.join(" ")).collect();
    assert_eq!(
        commands,
        [
            "-t nat -D PREROUTING -i eth9 -j RETURN",
            "-t nat -D PREROUTING -p tcp -j ISTIO_INBOUND",
            "-t nat -D OUTPUT -p tcp -j ISTIO_OUTPUT",
            "-t nat -D OUTPUT -p tcp -j ISTIO_OUTPUT",
            "-t nat -F ISTIO_INBOUND",
            "-t nat -F ISTIO_OUTPUT",
            "-t nat -X ISTIO_INBOUND",
            "-t nat -X ISTIO_OUTPUT",
        ]
    );
    assert!(clean::commands("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n", &[]).is_empty());
}

/// istio-iptables' `--redirect-dns` with two proxy uids and gids and the pod's resolver at
/// 127.0.0.53 (Istio's own `dns-uid-gid` case: no inbound or outbound capture), rule for
/// rule as istio-iptables writes them.
#[test]
fn dns_capture_is_istio_iptables_redirect_dns() {
    let flags =
        ["-u", "3,4", "-g", "1,2", "-b", "", "-d", "", "-i", "", "--redirect-dns", "--dns-servers", "127.0.0.53"];
    let rules = Ruleset::build(&options(&flags).unwrap(), Family::V4);
    let of = |table: Table| -> Vec<String> {
        rules
            .rules
            .iter()
            .filter(|r| r.table == table)
            .map(|r| format!("-A {} {}", r.chain, r.args.join(" ")))
            .collect()
    };
    let mut nat = vec![
        "-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN".to_owned(),
        "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001".into(),
        "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006".into(),
        "-A OUTPUT -j ISTIO_OUTPUT".into(),
        "-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN".into(),
    ];
    for uid in ["3", "4"] {
        nat.push(format!("-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner {uid} -j ISTIO_IN_REDIRECT"));
        nat.push(format!("-A ISTIO_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --uid-owner {uid} -j RETURN"));
        nat.push(format!("-A ISTIO_OUTPUT -m owner --uid-owner {uid} -j RETURN"));
    }
    for gid in ["1", "2"] {
        nat.push(format!("-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner {gid} -j ISTIO_IN_REDIRECT"));
        nat.push(format!("-A ISTIO_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --gid-owner {gid} -j RETURN"));
        nat.push(format!("-A ISTIO_OUTPUT -m owner --gid-owner {gid} -j RETURN"));
    }
    nat.extend([
        "-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS".to_owned(),
        "-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d 127.0.0.53/32 -j REDIRECT --to-ports 15053".into(),
        "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 127.0.0.53/32 -j REDIRECT --to-port 15053".into(),
        "-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN".into(),
    ]);
    assert_eq!(of(Table::Nat), nat);
    let mut raw = vec!["-A OUTPUT -j ISTIO_OUTPUT_DNS".to_owned()];
    for owner in ["--uid-owner 3", "--uid-owner 4", "--gid-owner 1", "--gid-owner 2"] {
        raw.push(format!("-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner {owner} -j CT --zone 1"));
        raw.push(format!("-A ISTIO_OUTPUT_DNS -p udp --sport 15053 -m owner {owner} -j CT --zone 2"));
    }
    raw.extend([
        "-A PREROUTING -j ISTIO_INBOUND".to_owned(),
        "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 127.0.0.53/32 -j CT --zone 2".into(),
        "-A ISTIO_INBOUND -p udp --sport 53 -s 127.0.0.53/32 -j CT --zone 1".into(),
    ]);
    assert_eq!(of(Table::Raw), raw);
    let input = rules.restore_input();
    assert!(input.contains("COMMIT\n*raw\n:ISTIO_OUTPUT_DNS - [0:0]\n:ISTIO_INBOUND - [0:0]\n"), "{input}");
    // Without DNS capture, nothing in raw and TCP only through ISTIO_OUTPUT, as before.
    let plain = Ruleset::build(&options(&[]).unwrap(), Family::V4);
    assert!(plain.rules.iter().all(|r| r.table == Table::Nat));
    assert!(!plain.restore_input().contains("*raw"));
}

#[test]
fn capture_all_dns_redirects_every_server_and_clean_removes_raw_too() {
    let rules = Ruleset::build(&options(&["--redirect-dns", "--capture-all-dns"]).unwrap(), Family::V4);
    let lines: Vec<String> = rules.rules.iter().map(|r| format!("-A {} {}", r.chain, r.args.join(" "))).collect();
    assert!(lines.contains(&"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053".to_owned()));
    assert!(lines.contains(&"-A ISTIO_INBOUND -p udp --sport 53 -j CT --zone 1".to_owned()));
    let saved = "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT_DNS - [0:0]\n:ISTIO_INBOUND - [0:0]\n\
-A PREROUTING -j ISTIO_INBOUND\n-A OUTPUT -j ISTIO_OUTPUT_DNS\n-A OUTPUT -j CT --notrack\nCOMMIT\n";
    let commands: Vec<String> = clean::commands(saved, &[]).iter().map(|c| c.join(" ")).collect();
    assert_eq!(
        commands,
        [
            "-t raw -D PREROUTING -j ISTIO_INBOUND",
            "-t raw -D OUTPUT -j ISTIO_OUTPUT_DNS",
            "-t raw -F ISTIO_OUTPUT_DNS",
            "-t raw -F ISTIO_INBOUND",
            "-t raw -X ISTIO_OUTPUT_DNS",
            "-t raw -X ISTIO_INBOUND",
        ]
    );
}
