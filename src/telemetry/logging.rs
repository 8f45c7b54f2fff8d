//! Outrider's own logs: a `tracing` subscriber writing to stderr, as text or as one JSON
//! object per line, with a filter that the command line or the environment sets at start
//! and `/logging` changes at run time.
//!
//! The filter takes `tracing`'s directive syntax: a level (`debug`) or per-module levels
//! (`info,outrider::xds=debug`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// The level when neither the command line nor `RUST_LOG` says.
pub const DEFAULT_FILTER: &str = "info";

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("invalid log filter {0:?}: {1}")]
    Filter(String, String),
    #[error("cannot change the log filter: {0}")]
    Reload(String),
    #[error("cannot open the log file {0}: {1}")]
    File(String, String),
    #[error("a logger is already installed")]
    AlreadyInstalled,
}

/// Changes the running filter (held by the admin server).
#[derive(Debug, Clone)]
pub struct LogControl {
    handle: reload::Handle<EnvFilter, Registry>,
    current: Arc<Mutex<String>>,
}

impl LogControl {
    /// Replaces the filter with `directives` (a level or `tracing` directives).
    pub fn set(&self, directives: &str) -> Result<(), LogError> {
        let filter = parse(directives)?;
        self.handle.reload(filter).map_err(|e| LogError::Reload(e.to_string()))?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = directives.to_owned();
        tracing::info!(filter = directives, "log filter changed");
        Ok(())
    }

    /// The filter in force, as it was given.
    pub fn current(&self) -> String {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Installs the process's logger. `level` (from the command line) wins over `RUST_LOG`,
/// which wins over [`DEFAULT_FILTER`].
pub fn init(level: Option<&str>, json: bool) -> Result<LogControl, LogError> {
    init_to(level, json, None)
}

/// [`init`], writing to the file at `path` (appended to, as Envoy's `--log-path`) instead
/// of standard error when given.
pub fn init_to(level: Option<&str>, json: bool, path: Option<&Path>) -> Result<LogControl, LogError> {
    let env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let directives = level.map(str::to_owned).or(env).unwrap_or_else(|| DEFAULT_FILTER.to_owned());
    let (filter, handle) = reload::Layer::new(parse(&directives)?);
    let output: Box<dyn Layer<_> + Send + Sync> = match path {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| LogError::File(path.display().to_string(), e.to_string()))?;
            let layer = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Mutex::new(file));
            if json { Box::new(layer.json()) } else { Box::new(layer) }
        }
        None if json => Box::new(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)),
        None => Box::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr),
        ),
    };
    tracing_subscriber::registry().with(filter).with(output).try_init().map_err(|_| LogError::AlreadyInstalled)?;
    Ok(LogControl { handle, current: Arc::new(Mutex::new(directives)) })
}

fn parse(directives: &str) -> Result<EnvFilter, LogError> {
    // Envoy's level names that `tracing` lacks.
    let directives = match directives.trim() {
        "critical" => "error",
        "warning" => "warn",
        other => other,
    };
    EnvFilter::builder().parse(directives).map_err(|e| LogError::Filter(directives.to_owned(), e.to_string()))
}
