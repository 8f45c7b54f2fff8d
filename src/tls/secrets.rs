//! A TLS context resolved against the secrets it names: the certificates to present and the
//! effective validation context (an SDS secret merged over the inline default, as Envoy's
//! combined validation context), with the version of each secret used (and the
//! modification time of each file read) so that a cached config can tell when it is stale.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::TlsError;
use crate::config::secret::{CertificateValidationContext, DataSource, Secret, SecretKind, TlsCertificate};
use crate::config::tls::{Certificates, CommonTlsContext, SdsSecretConfig, Validation};

/// Where the secrets of the served configuration are looked up (the snapshot's).
pub trait SecretSource {
    fn secret(&self, name: &str) -> Option<SecretRef<'_>>;
}

/// A secret and what identifies its version: a new SDS push changes one or the other.
#[derive(Debug, Clone, Copy)]
pub struct SecretRef<'a> {
    pub secret: &'a Secret,
    pub version: &'a str,
    pub updated: SystemTime,
}

/// The version of one secret a config was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    version: String,
    updated: SystemTime,
}

/// The material of one context.
#[derive(Debug)]
pub(crate) struct Material<'a> {
    pub certificates: Vec<Cow<'a, TlsCertificate>>,
    pub validation: Option<Cow<'a, CertificateValidationContext>>,
    pub stamps: Vec<Stamp>,
}

/// The files a config was built from, with their modification times then: a file
/// rewritten in place (a rotated certificate on disk) makes the config stale.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FileStamps(Vec<(PathBuf, Option<SystemTime>)>);

impl Material<'_> {
    /// Taken before the files are read, so a write racing the read shows as a change later.
    pub fn file_stamps(&self) -> FileStamps {
        let certificates = self.certificates.iter().flat_map(|c| [&c.certificate_chain, c.private_key.source()]);
        let ca = self.validation.as_ref().and_then(|v| v.trusted_ca.as_ref());
        let files = certificates
            .chain(ca)
            .filter_map(|source| match source {
                DataSource::Filename(path) => Some((path.clone(), modified(path))),
                _ => None,
            })
            .collect();
        FileStamps(files)
    }
}

impl FileStamps {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every file still has the modification time it had (one `stat` each; most
    /// contexts, SDS-fed, have none).
    pub fn current(&self) -> bool {
        self.0.iter().all(|(path, then)| modified(path) == *then)
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Resolves `context` against `secrets`. Every SDS secret it names must be present.
pub(crate) fn resolve<'a>(
    context: &'a CommonTlsContext,
    secrets: &'a dyn SecretSource,
) -> Result<Material<'a>, TlsError> {
    let mut stamps = Vec::new();
    let mut fetch = |config: &SdsSecretConfig| -> Result<&'a Secret, TlsError> {
        let found = secrets.secret(&config.name).ok_or_else(|| TlsError::SecretMissing(config.name.clone()))?;
        stamps.push(Stamp { version: found.version.to_owned(), updated: found.updated });
        Ok(found.secret)
    };
    let certificates = match &context.certificates {
        Certificates::None => Vec::new(),
        Certificates::Inline(certs) => certs.iter().map(Cow::Borrowed).collect(),
        Certificates::Sds(configs) => configs
            .iter()
            .map(|config| match &fetch(config)?.kind {
                SecretKind::TlsCertificate(cert) => Ok(Cow::Borrowed(cert)),
                SecretKind::ValidationContext(_) => Err(kind_error(config, "TLS certificate")),
            })
            .collect::<Result<_, _>>()?,
    };
    let validation = match &context.validation {
        None => None,
        Some(Validation::Inline(v)) => Some(Cow::Borrowed(v)),
        Some(Validation::Sds(config)) => Some(Cow::Borrowed(validation_of(fetch(config)?, config)?)),
        Some(Validation::Combined { default, sds }) => {
            Some(Cow::Owned(validation_of(fetch(sds)?, sds)?.merged_over(default)))
        }
    };
    Ok(Material { certificates, validation, stamps })
}

/// Whether `stamps` are still the versions of the secrets `context` names.
pub(crate) fn current(context: &CommonTlsContext, secrets: &dyn SecretSource, stamps: &[Stamp]) -> bool {
    let configs = context.sds_secret_configs();
    configs.len() == stamps.len()
        && configs.iter().zip(stamps).all(|(config, stamp)| {
            secrets.secret(&config.name).is_some_and(|s| s.version == stamp.version && s.updated == stamp.updated)
        })
}

fn validation_of<'a>(
    secret: &'a Secret,
    config: &SdsSecretConfig,
) -> Result<&'a CertificateValidationContext, TlsError> {
    match &secret.kind {
        SecretKind::ValidationContext(v) => Ok(v),
        SecretKind::TlsCertificate(_) => Err(kind_error(config, "validation context")),
    }
}

fn kind_error(config: &SdsSecretConfig, expected: &'static str) -> TlsError {
    TlsError::SecretKind { name: config.name.clone(), expected }
}
