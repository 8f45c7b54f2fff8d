//! The application's CPU time read from its processes, for a sidecar in a Kubernetes pod:
//! there each container has a cgroup (and a cgroup namespace) of its own, so the cgroup a
//! sidecar sees is its own container's, not the application's. With the pod's process
//! namespace shared (`shareProcessNamespace: true`, which `outrider inject` sets when it
//! asks for this source), the application's processes are in the sidecar's `/proc`.
//!
//! Counted: every process but this one and those running as this process's user (the
//! sidecar's: Istio runs it as 1337, which applications may not use), each one's user and
//! system time and that of the children it has reaped (`/proc/<pid>/stat` fields 14–17, in
//! USER_HZ ticks, which is 100 on every Linux that matters). A process that exits takes
//! its time with it, so the sum can go back; a reading across that is dropped by
//! [`super::CpuSample::utilization_since`].

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// USER_HZ: the unit of `/proc/<pid>/stat`'s times.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds spent by the processes under `proc` other than `own_pid` and those of
/// `own_uid`; `None` when `proc` cannot be listed.
pub(super) fn cpu_seconds(proc: &Path, own_pid: u32, own_uid: u32) -> Option<f64> {
    let mut ticks: u64 = 0;
    for entry in std::fs::read_dir(proc).ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == own_pid || entry.metadata().map_or(true, |m| m.uid() == own_uid) {
            continue;
        }
        // A process may exit between the listing and the read: it then counts nothing.
        if let Some(spent) = std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|s| stat_ticks(&s)) {
            ticks = ticks.saturating_add(spent);
        }
    }
    Some(ticks as f64 / TICKS_PER_SECOND)
}

/// utime + stime + cutime + cstime of one `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`.
fn stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // After the name: state is field 3, so utime (14) is the 12th field here.
    let fields: Vec<&str> = rest.split_whitespace().skip(11).take(4).collect();
    if fields.len() < 4 {
        return None;
    }
    fields.iter().try_fold(0u64, |sum, f| Some(sum.saturating_add(f.parse::<i64>().ok()?.max(0) as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, name: &str, utime: u64, stime: u64) -> String {
        format!("{pid} ({name}) S 1 1 1 0 -1 4194560 100 0 0 0 {utime} {stime} 5 7 20 0 1 0 100 1000 10")
    }

    #[test]
    fn the_fields_are_counted_from_the_last_parenthesis() {
        assert_eq!(stat_ticks(&stat(7, "app", 30, 12)), Some(30 + 12 + 5 + 7));
        assert_eq!(stat_ticks(&stat(7, "odd) name (x", 1, 2)), Some(1 + 2 + 5 + 7));
        assert_eq!(stat_ticks("7 (short) S 1 2"), None);
        assert_eq!(stat_ticks("no parenthesis"), None);
    }

    #[test]
    fn every_process_but_this_one_and_its_users() {
        let proc = tempfile::tempdir().unwrap();
        for (pid, utime) in [(1u32, 2u64), (40, 300), (41, 100), (99, 5000)] {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat(pid, "p", utime, 0)).unwrap();
        }
        std::fs::create_dir(proc.path().join("self-not-a-pid")).unwrap();
        // A process gone between the listing and the read: no stat file.
        std::fs::create_dir(proc.path().join("42")).unwrap();
        let own_uid = std::fs::metadata(proc.path()).unwrap().uid();
        // Every directory here is this user's: all are the sidecar's.
        assert_eq!(cpu_seconds(proc.path(), 99, own_uid), Some(0.0));
        // Another user: all but our own pid, each with its 12 ticks of children.
        let seconds = cpu_seconds(proc.path(), 99, own_uid.wrapping_add(1)).unwrap();
        assert!((seconds - (2.0 + 300.0 + 100.0 + 3.0 * 12.0) / 100.0).abs() < 1e-9, "{seconds}");
        assert_eq!(cpu_seconds(&proc.path().join("missing"), 1, 0), None);
    }
}
