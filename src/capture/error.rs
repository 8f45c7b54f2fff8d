//! Why capture could not be set up or removed: the error every step of `outrider capture`
//! returns.

/// Why capture could not be set up or removed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{flag} {value:?}: {why}")]
    Invalid { flag: String, value: String, why: String },
    #[error("cannot run {program}: {error} (is it installed? capture needs iptables and iproute2)")]
    Spawn { program: String, error: std::io::Error },
    #[error("{program} failed ({status}): {stderr}")]
    Failed { program: String, status: String, stderr: String },
}
