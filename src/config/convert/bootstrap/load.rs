//! Reading a bootstrap: the file, its text or its JSON form, validated into a
//! [`Bootstrap`]. These are `Bootstrap`'s own constructors, written here beside the
//! conversion they run so that `config::bootstrap`, whose types the conversion builds,
//! does not use the conversion back.

use std::path::Path;

use crate::config::bootstrap::{Bootstrap, BootstrapError, parse_document};
use crate::config::error::Warnings;

impl Bootstrap {
    /// Reads and validates the bootstrap file at `path` (YAML or JSON).
    pub fn load(path: &Path) -> Result<Self, BootstrapError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| BootstrapError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text).map_err(|e| match e {
            BootstrapError::Syntax { reason, .. } => {
                BootstrapError::Syntax { path: path.display().to_string(), reason }
            }
            other => other,
        })
    }

    /// Validates a bootstrap given as text (YAML, of which JSON is a subset).
    pub fn parse(text: &str) -> Result<Self, BootstrapError> {
        let document = parse_document(text).map_err(|reason| BootstrapError::Syntax { path: String::new(), reason })?;
        Self::from_document(document)
    }

    /// Validates a bootstrap already read into its JSON form.
    pub fn from_document(document: serde_json::Value) -> Result<Self, BootstrapError> {
        let mut warnings = Warnings::new();
        let mut bootstrap = super::bootstrap(document, &mut warnings).map_err(BootstrapError::Invalid)?;
        bootstrap.ignored = warnings.into_items();
        Ok(bootstrap)
    }
}
