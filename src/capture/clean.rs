//! Removing the capture rules: read the `nat` table (and `raw`, where DNS capture puts its
//! conntrack zones) as `iptables-save` prints it and undo exactly what capture added — the
//! jumps from PREROUTING and OUTPUT into the ISTIO_* chains, the excluded-interface
//! shortcuts, then the chains themselves. Working from the table's actual content makes
//! `--clean` remove duplicates too, and do nothing on a table that has no capture rules.

use super::rules::{CHAINS, RAW_CHAINS};

/// The iptables arguments (after the program name) that remove the capture rules from the
/// `nat` or `raw` table whose `iptables-save` output is `saved`. `exclude_interfaces` are
/// the interfaces capture was told to leave alone, whose RETURN rules it added.
pub fn commands(saved: &str, exclude_interfaces: &[String]) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut chains = Vec::new();
    let mut table: Option<(&str, &[&str])> = None;
    for line in saved.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('*') {
            table = match name {
                "nat" => Some(("nat", &CHAINS[..])),
                "raw" => Some(("raw", &RAW_CHAINS[..])),
                _ => None,
            };
            continue;
        }
        let Some((name, ours)) = table else { continue };
        if let Some(declared) = line.strip_prefix(':') {
            let chain = declared.split_whitespace().next().unwrap_or_default();
            if ours.contains(&chain) {
                chains.push((name, chain.to_owned()));
            }
            continue;
        }
        let Some(rule) = line.strip_prefix("-A ") else { continue };
        let tokens: Vec<&str> = rule.split_whitespace().collect();
        let Some((&chain, spec)) = tokens.split_first() else { continue };
        if (chain == "PREROUTING" || chain == "OUTPUT") && is_capture_rule(chain, spec, ours, exclude_interfaces) {
            let mut command = vec!["-t".to_owned(), name.to_owned(), "-D".to_owned(), chain.to_owned()];
            command.extend(spec.iter().map(|t| (*t).to_owned()));
            commands.push(command);
        }
    }
    // Chains refer to each other: empty them all before deleting any.
    for flag in ["-F", "-X"] {
        for (table, chain) in &chains {
            commands.push(vec!["-t".to_owned(), (*table).to_owned(), flag.to_owned(), chain.clone()]);
        }
    }
    commands
}

/// A jump into one of the capture chains (`ours`), or an excluded-interface shortcut.
fn is_capture_rule(chain: &str, spec: &[&str], ours: &[&str], exclude_interfaces: &[String]) -> bool {
    let target = spec.windows(2).find(|w| w[0] == "-j").map(|w| w[1]);
    if target.is_some_and(|t| ours.contains(&t)) {
        return true;
    }
    let direction = if chain == "PREROUTING" { "-i" } else { "-o" };
    match spec {
        [flag, interface, "-j", "RETURN"] if *flag == direction => exclude_interfaces.iter().any(|i| i == interface),
        _ => false,
    }
}
