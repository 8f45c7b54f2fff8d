//! Why injection or bootstrap generation failed: the error `outrider inject` and
//! `outrider bootstrap` return.

/// Why injection or bootstrap generation failed.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("{variable} {why}")]
    Env { variable: String, why: String },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("document {index}: {why}")]
    Manifest { index: usize, why: String },
}
