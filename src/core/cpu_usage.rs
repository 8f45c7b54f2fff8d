//! The application's CPU use against its limit, for the load this sidecar reports about
//! it, from one of the [`CpuSource`]s:
//! - the cgroup this process sees: its CPU time (cgroup v2 `cpu.stat` `usage_usec`, else
//!   v1 `cpuacct.usage`) over the CPUs its quota allows (`cpu.max`, else v1
//!   `cpu.cfs_quota_us` / `cpu.cfs_period_us`); with no quota, over every CPU of the host;
//!   without a cgroup to read, the host's busy share (`/proc/stat`). Right where the
//!   sidecar shares the application's cgroup (a VM, a process supervisor); in a Kubernetes
//!   container it is the sidecar's own container's, which says nothing of the application;
//! - the application's processes in a shared process namespace (`processes`), over the
//!   application containers' CPU limit.

mod processes;

use std::path::Path;
use std::time::Instant;

/// Where the application's CPU use is read from (`node.metadata.OUTRIDER_APP_CPU`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum CpuSource {
    /// `cgroup` outside Kubernetes; in a Kubernetes container (`KUBERNETES_SERVICE_HOST`
    /// set), where the cgroup is the sidecar container's own, `off`.
    #[default]
    Auto,
    /// The cgroup this process sees as `/sys/fs/cgroup`.
    Cgroup,
    /// The pod's other processes (a shared process namespace) but the sidecar user's,
    /// over `cpus` (the application containers' CPU limit), else over the host's CPUs.
    Processes { cpus: Option<f64> },
    /// No reading: the reports carry no utilization.
    Off,
}

impl CpuSource {
    /// `Auto` made definite, for a process that does (`in_kubernetes`) or does not run in a
    /// Kubernetes container.
    pub fn resolved(self, in_kubernetes: bool) -> Self {
        match self {
            CpuSource::Auto if in_kubernetes => CpuSource::Off,
            CpuSource::Auto => CpuSource::Cgroup,
            other => other,
        }
    }
}

/// One reading of the CPU time spent and the CPUs it may spend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// CPU seconds spent, as a counter (its differences are what count).
    pub spent: f64,
    /// The CPUs the pod may use: its quota, or the host's CPUs.
    pub cpus: f64,
    pub at: Instant,
}

impl CpuSample {
    /// The share of its CPUs used between `earlier` and this sample, in [0, 1]; `None`
    /// when no time passed or the counter went back (a cgroup replaced under us).
    pub fn utilization_since(&self, earlier: &CpuSample) -> Option<f64> {
        let seconds = self.at.checked_duration_since(earlier.at)?.as_secs_f64();
        let spent = self.spent - earlier.spent;
        if seconds <= 0.0 || spent < 0.0 || self.cpus <= 0.0 {
            return None;
        }
        Some((spent / (seconds * self.cpus)).clamp(0.0, 1.0))
    }
}

/// Reads the CPU counters of `source` now; `None` when nothing can be read (not Linux, no
/// /proc) or the source is off. `Auto` reads as `Cgroup`: resolve it first.
pub fn sample(source: CpuSource) -> Option<CpuSample> {
    match source {
        CpuSource::Off => None,
        CpuSource::Auto | CpuSource::Cgroup => sample_under(Path::new("/"), host_cpus()),
        CpuSource::Processes { cpus } => {
            use std::os::unix::fs::MetadataExt;
            let at = Instant::now();
            let own_uid = std::fs::metadata("/proc/self").ok()?.uid();
            let spent = processes::cpu_seconds(Path::new("/proc"), std::process::id(), own_uid)?;
            Some(CpuSample { spent, cpus: cpus.unwrap_or_else(host_cpus), at })
        }
    }
}

fn host_cpus() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// [`sample`] with the file system rooted at `root` (tests give a directory of their own).
fn sample_under(root: &Path, host_cpus: f64) -> Option<CpuSample> {
    let at = Instant::now();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).ok();
    if let Some(stat) = read("sys/fs/cgroup/cpu.stat") {
        let usage_usec = stat
            .lines()
            .find_map(|line| line.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())?;
        let cpus = read("sys/fs/cgroup/cpu.max").and_then(|max| quota_v2(&max)).unwrap_or(host_cpus);
        return Some(CpuSample { spent: usage_usec as f64 / 1e6, cpus, at });
    }
    if let Some(usage) = read("sys/fs/cgroup/cpuacct/cpuacct.usage").and_then(|v| v.trim().parse::<u64>().ok()) {
        let quota = read("sys/fs/cgroup/cpu/cpu.cfs_quota_us").and_then(|v| v.trim().parse::<i64>().ok());
        let period = read("sys/fs/cgroup/cpu/cpu.cfs_period_us").and_then(|v| v.trim().parse::<i64>().ok());
        let cpus = match (quota, period) {
            (Some(quota), Some(period)) if quota > 0 && period > 0 => quota as f64 / period as f64,
            _ => host_cpus,
        };
        return Some(CpuSample { spent: usage as f64 / 1e9, cpus, at });
    }
    // The host's: busy jiffies (all but idle and iowait) over every CPU. USER_HZ is 100 on
    // every Linux that matters; only the ratio is used, over the host's CPUs.
    let stat = read("proc/stat")?;
    let fields: Vec<u64> =
        stat.lines().next()?.strip_prefix("cpu ")?.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0).saturating_add(fields.get(4).copied().unwrap_or(0));
    Some(CpuSample { spent: total.saturating_sub(idle) as f64 / 100.0, cpus: host_cpus, at })
}

/// `cpu.max`: `<quota> <period>` in microseconds, or `max <period>` (no quota).
fn quota_v2(max: &str) -> Option<f64> {
    let mut parts = max.split_whitespace();
    let quota: f64 = parts.next()?.parse().ok()?;
    let period: f64 = parts.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn cgroup_v2_with_and_without_a_quota() {
        let root = root_with(&[
            ("sys/fs/cgroup/cpu.stat", "usage_usec 2500000\nuser_usec 1\n"),
            ("sys/fs/cgroup/cpu.max", "50000 100000\n"),
        ]);
        let sample = sample_under(root.path(), 8.0).unwrap();
        assert_eq!((sample.spent, sample.cpus), (2.5, 0.5));
        let root =
            root_with(&[("sys/fs/cgroup/cpu.stat", "usage_usec 1\n"), ("sys/fs/cgroup/cpu.max", "max 100000\n")]);
        assert_eq!(sample_under(root.path(), 8.0).unwrap().cpus, 8.0);
    }

    #[test]
    fn cgroup_v1_then_the_host() {
        let root = root_with(&[
            ("sys/fs/cgroup/cpuacct/cpuacct.usage", "3000000000\n"),
            ("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"),
            ("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"),
        ]);
        let sample = sample_under(root.path(), 2.0).unwrap();
        assert_eq!((sample.spent, sample.cpus), (3.0, 2.0));
        let root = root_with(&[("proc/stat", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")]);
        let sample = sample_under(root.path(), 4.0).unwrap();
        assert_eq!((sample.spent, sample.cpus), (1.5, 4.0));
        assert!(sample_under(tempfile::tempdir().unwrap().path(), 4.0).is_none());
    }

    #[test]
    fn utilization_is_the_share_of_the_allowed_cpus() {
        let at = Instant::now();
        let earlier = CpuSample { spent: 10.0, cpus: 0.5, at };
        let later = CpuSample { spent: 10.25, cpus: 0.5, at: at + Duration::from_secs(1) };
        assert_eq!(later.utilization_since(&earlier), Some(0.5));
        let throttled = CpuSample { spent: 11.0, ..later };
        assert_eq!(throttled.utilization_since(&earlier), Some(1.0), "clamped");
        let reset = CpuSample { spent: 1.0, ..later };
        assert_eq!(reset.utilization_since(&earlier), None);
        assert_eq!(earlier.utilization_since(&later), None);
    }
}
