//! Errors and warnings of configuration conversion, each carrying the field path of the
//! offending value so that a NACK or `outrider validate` says exactly what was wrong.

use std::fmt;

/// A value that Outrider refuses, with where it was found.
///
/// Paths are built inside-out: the function that finds the bad value names the field, and
/// every caller on the way up prepends its own part with [`ConfigError::at`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    path: String,
    reason: String,
}

impl ConfigError {
    /// An error about the field `field` (relative to the message being converted).
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { path: field.into(), reason: reason.into() }
    }

    /// Prepends `parent` to the path: `e.at("load_assignment")` turns `endpoints[0]` into
    /// `load_assignment.endpoints[0]`.
    pub fn at(mut self, parent: impl fmt::Display) -> Self {
        let parent = parent.to_string();
        self.path = match (parent.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => parent,
            (false, false) if self.path.starts_with('[') => format!("{parent}{}", self.path),
            (false, false) => format!("{parent}.{}", self.path),
        };
        self
    }

    /// The field path, e.g. `ring_hash_lb_config.minimum_ring_size`.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() { f.write_str(&self.reason) } else { write!(f, "{}: {}", self.path, self.reason) }
    }
}

/// A field that was set but has no effect in Outrider: harmless to ignore, reported once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ignored {
    pub path: String,
    pub what: String,
}

/// The ignored fields met during one conversion.
#[derive(Debug, Default, Clone)]
pub struct Warnings {
    items: Vec<Ignored>,
}

impl Warnings {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `path` was set and ignored, and why that is harmless.
    pub fn ignored(&mut self, path: impl Into<String>, what: impl Into<String>) {
        self.items.push(Ignored { path: path.into(), what: what.into() });
    }

    /// Converts with a child context: warnings recorded by `f` get `parent` prepended.
    pub fn within<T>(&mut self, parent: impl fmt::Display, f: impl FnOnce(&mut Warnings) -> T) -> T {
        let mut inner = Warnings::new();
        let out = f(&mut inner);
        let parent = parent.to_string();
        for Ignored { path, what } in inner.items {
            let path = if path.starts_with('[') { format!("{parent}{path}") } else { format!("{parent}.{path}") };
            self.items.push(Ignored { path, what });
        }
        out
    }

    pub fn items(&self) -> &[Ignored] {
        &self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn into_items(self) -> Vec<Ignored> {
        self.items
    }
}

/// Shorthand for conversion results.
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// Adds field-path context to a conversion result: `convert(x).at_field("cluster")`.
pub trait AtField<T> {
    fn at_field(self, parent: impl fmt::Display) -> Result<T>;
}

impl<T> AtField<T> for Result<T> {
    fn at_field(self, parent: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.at(parent))
    }
}
