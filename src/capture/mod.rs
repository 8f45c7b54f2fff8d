//! `outrider capture`: transparent capture of a pod's TCP traffic, as Istio's init
//! container (`istio-iptables`) sets it up. Run once in the pod's network namespace before
//! the application starts (an init container with `NET_ADMIN`, or a CNI plugin doing the
//! same); `--clean` removes the rules.
//!
//! Outbound TCP is redirected to the proxy's 15001 (a `use_original_dst` listener that
//! hands each connection to the listener of its original destination), inbound TCP to
//! 15006 (a listener with the `original_dst` filter), except the proxy's own traffic (uid
//! and gid 1337), localhost, the proxy's health and telemetry ports and whatever the
//! options exclude. The proxy recovers each connection's original destination with
//! `SO_ORIGINAL_DST` (`IP6T_SO_ORIGINAL_DST` for IPv6).
//!
//! The rules are built as data ([`rules::Ruleset`]) and installed in one
//! `iptables-restore --noflush` transaction per family, after removing any earlier
//! capture rules, so running it twice leaves one set.

pub mod clean;
mod error;
mod exec;
pub mod options;
pub mod rules;

pub use error::CaptureError;
pub use options::{CaptureArgs, Family, Options};
pub use rules::Ruleset;

/// Runs `outrider capture` with `args`: installs the rules, removes them (`--clean`), or
/// prints them (`--dry-run`).
pub fn run(args: &CaptureArgs) -> Result<(), CaptureError> {
    let options = Options::from_args(args)?;
    let families = options.families();
    if args.dry_run {
        for family in families {
            let action = if args.clean { "removes earlier rules" } else { "installs" };
            println!("# {}-restore --noflush ({action})", family.iptables());
            print!("{}", Ruleset::build(&options, family).restore_input());
        }
        return Ok(());
    }
    for family in families {
        remove(&options, family)?;
        if args.clean {
            tracing::info!(family = family.iptables(), "capture rules removed");
            continue;
        }
        let rules = Ruleset::build(&options, family);
        exec::restore(family, &rules.restore_input())?;
        tracing::info!(family = family.iptables(), rules = rules.rules.len(), "capture rules installed");
        if family == Family::V6 {
            // IPv6 loopback is ::1/128 only: the inbound passthrough source must be added.
            exec::add_inbound_source_v6()?;
        }
    }
    Ok(())
}

/// Removes the capture rules of `family` that the table holds.
fn remove(options: &Options, family: Family) -> Result<(), CaptureError> {
    let saved = exec::save_nat(family)?;
    for command in clean::commands(&saved, &options.exclude_interfaces) {
        exec::iptables(family, &command)?;
    }
    // DNS capture's conntrack zones, if an earlier capture had it on.
    let saved = exec::save_raw(family)?;
    for command in clean::commands(&saved, &[]) {
        exec::iptables(family, &command)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
