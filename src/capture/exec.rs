//! Running iptables and iproute2: the only part of capture that touches the system.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use super::error::CaptureError;
use super::options::Family;

/// `iptables-save -t nat` (or ip6tables-save).
pub fn save_nat(family: Family) -> Result<String, CaptureError> {
    save(family, "nat")
}

/// `iptables-save -t raw` (DNS capture's conntrack zones).
pub fn save_raw(family: Family) -> Result<String, CaptureError> {
    save(family, "raw")
}

fn save(family: Family, table: &str) -> Result<String, CaptureError> {
    let program = format!("{}-save", family.iptables());
    let output = checked(&program, Command::new(&program).args(["-t", table]).output())?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `iptables-restore --noflush` with `input` on stdin: one transaction.
pub fn restore(family: Family, input: &str) -> Result<(), CaptureError> {
    let program = format!("{}-restore", family.iptables());
    let spawn = |error| CaptureError::Spawn { program: program.clone(), error };
    let mut child = Command::new(&program)
        .arg("--noflush")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(spawn)?;
    }
    checked(&program, child.wait_with_output()).map(drop)
}

/// `iptables ARGS` (or ip6tables).
pub fn iptables(family: Family, args: &[String]) -> Result<(), CaptureError> {
    let program = family.iptables();
    checked(program, Command::new(program).args(args).output()).map(drop)
}

/// `ip -6 addr add ::6/128 dev lo`, as Istio does: the inbound passthrough clusters bind
/// `::6`, and IPv6 gives lo only `::1/128`. Already present is fine.
pub fn add_inbound_source_v6() -> Result<(), CaptureError> {
    let output = Command::new("ip")
        .args(["-6", "addr", "add", "::6/128", "dev", "lo"])
        .output()
        .map_err(|error| CaptureError::Spawn { program: "ip".to_owned(), error })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let present = ["exists", "already assigned"].iter().any(|s| stderr.to_ascii_lowercase().contains(s));
    if output.status.success() || present {
        Ok(())
    } else {
        Err(CaptureError::Failed { program: "ip".to_owned(), status: output.status.to_string(), stderr: stderr.into() })
    }
}

fn checked(program: &str, output: std::io::Result<Output>) -> Result<Output, CaptureError> {
    let output = output.map_err(|error| CaptureError::Spawn { program: program.to_owned(), error })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(CaptureError::Failed {
            program: program.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
