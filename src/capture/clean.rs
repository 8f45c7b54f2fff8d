//! Removing the capture rules: read the `nat` table as `iptables-save` prints it and undo
//! exactly what capture added — the jumps from PREROUTING and OUTPUT into the ISTIO_*
//! chains, the excluded-interface shortcuts, then the chains themselves. Working from
//! the table's actual content makes `--clean` remove duplicates too, and do nothing on a
//! table that has no capture rules.

use super::rules::CHAINS;

/// The iptables arguments (after the program name) that remove the capture rules from a
/// `nat` table whose `iptables-save` output is `saved`. `exclude_interfaces` are the
/// interfaces capture was told to leave alone, whose RETURN rules it added.
pub fn commands(saved: &str, exclude_interfaces: &[String]) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut chains = Vec::new();
    let mut in_nat = false;
    for line in saved.lines().map(str::trim) {
        if let Some(table) = line.strip_prefix('*') {
            in_nat = table == "nat";
            continue;
        }
        if !in_nat {
            continue;
        }
        if let Some(declared) = line.strip_prefix(':') {
            let name = declared.split_whitespace().next().unwrap_or_default();
            if CHAINS.contains(&name) {
                chains.push(name.to_owned());
            }
            continue;
        }
        let Some(rule) = line.strip_prefix("-A ") else { continue };
        let tokens: Vec<&str> = rule.split_whitespace().collect();
        let Some((&chain, spec)) = tokens.split_first() else { continue };
        if (chain == "PREROUTING" || chain == "OUTPUT") && is_capture_rule(chain, spec, exclude_interfaces) {
            let mut command = vec!["-t".to_owned(), "nat".to_owned(), "-D".to_owned(), chain.to_owned()];
            command.extend(spec.iter().map(|t| (*t).to_owned()));
            commands.push(command);
        }
    }
    // Chains refer to each other: empty them all before deleting any.
    for flag in ["-F", "-X"] {
        for chain in &chains {
            commands.push(vec!["-t".to_owned(), "nat".to_owned(), flag.to_owned(), chain.clone()]);
        }
    }
    commands
}

/// A jump into one of the capture chains, or an excluded-interface shortcut.
fn is_capture_rule(chain: &str, spec: &[&str], exclude_interfaces: &[String]) -> bool {
    let target = spec.windows(2).find(|w| w[0] == "-j").map(|w| w[1]);
    if target.is_some_and(|t| CHAINS.contains(&t)) {
        return true;
    }
    let direction = if chain == "PREROUTING" { "-i" } else { "-o" };
    match spec {
        [flag, interface, "-j", "RETURN"] if *flag == direction => exclude_interfaces.iter().any(|i| i == interface),
        _ => false,
    }
}
