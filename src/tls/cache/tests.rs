use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::*;
use crate::config::secret::{CertificateValidationContext, DataSource, PrivateKey, Secret, SecretKind, TlsCertificate};
use crate::config::tls::{Certificates, CommonTlsContext, SdsSecretConfig, SdsSource, TlsParams, Validation};
use crate::tls::SecretRef;

#[derive(Default)]
struct Secrets(HashMap<String, (Secret, String, SystemTime)>);

impl SecretSource for Secrets {
    fn secret(&self, name: &str) -> Option<SecretRef<'_>> {
        self.0.get(name).map(|(secret, version, updated)| SecretRef { secret, version, updated: *updated })
    }
}

impl Secrets {
    fn put(&mut self, kind: SecretKind, name: &str, version: &str) {
        let updated = SystemTime::UNIX_EPOCH + Duration::from_secs(self.0.len() as u64);
        self.0.insert(name.to_owned(), (Secret { name: name.to_owned(), kind }, version.to_owned(), updated));
    }

    /// A CA (`ROOTCA`) and a certificate it signed (`default`).
    fn mesh(version: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let mut secrets = Self::default();
        secrets.put(SecretKind::ValidationContext(validation(&ca.pem())), "ROOTCA", version);
        secrets.put(SecretKind::TlsCertificate(leaf(&ca)), "default", version);
        secrets
    }

    fn rotate(&mut self, version: &str) {
        let (secret, _, _) = self.0.remove("default").unwrap();
        self.put(secret.kind, "default", version);
    }
}

fn validation(ca_pem: &str) -> CertificateValidationContext {
    CertificateValidationContext { trusted_ca: Some(DataSource::InlineString(ca_pem.to_owned())), ..Default::default() }
}

fn leaf(ca: &CertifiedIssuer<'_, KeyPair>) -> TlsCertificate {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["server.test".to_owned()]).unwrap().signed_by(&key, ca).unwrap();
    TlsCertificate {
        certificate_chain: DataSource::InlineString(cert.pem()),
        private_key: PrivateKey::new(DataSource::InlineString(key.serialize_pem())),
    }
}

fn sds(name: &str) -> SdsSecretConfig {
    SdsSecretConfig { name: name.to_owned(), source: SdsSource::Ads, initial_fetch_timeout: None }
}

fn common() -> CommonTlsContext {
    CommonTlsContext {
        tls_params: TlsParams::SERVER_DEFAULT,
        certificates: Certificates::Sds(vec![sds("default")]),
        validation: Some(Validation::Sds(sds("ROOTCA"))),
        alpn_protocols: vec!["h2".into(), "http/1.1".into()],
    }
}

/// What holds a context in the proxy: a listener or a cluster.
struct Owner<C>(C);

fn listener() -> Arc<Owner<DownstreamTlsContext>> {
    Arc::new(Owner(DownstreamTlsContext { common: common(), require_client_certificate: true, require_sni: false }))
}

fn cluster() -> Arc<Owner<UpstreamTlsContext>> {
    Arc::new(Owner(UpstreamTlsContext { common: common(), sni: "b.test".into() }))
}

#[test]
fn a_config_is_built_once_per_secret_version() {
    let mut secrets = Secrets::mesh("1");
    let owner = listener();
    let mut cache = TlsCache::new();
    let first = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    let again = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    assert!(Arc::ptr_eq(&first, &again), "the second handshake reuses the config");

    secrets.rotate("2");
    let rotated = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    assert!(!Arc::ptr_eq(&first, &rotated), "a new secret version builds a new config");
    assert_eq!(cache.len(), (1, 0), "in place of the old one");
}

#[test]
fn entries_go_with_their_owner() {
    let secrets = Secrets::mesh("1");
    let mut cache = TlsCache::new();
    let old = listener();
    cache.server(&old, &old.0, &secrets).unwrap();
    drop(old);
    // The listener was replaced: its context is another, and the old entry is dropped.
    let new = listener();
    cache.server(&new, &new.0, &secrets).unwrap();
    assert_eq!(cache.len(), (1, 0));
}

#[test]
fn a_client_context_keeps_its_transport_id_across_rotation() {
    let mut secrets = Secrets::mesh("1");
    let mut cache = TlsCache::new();
    let (a, b) = (cluster(), cluster());
    let first = cache.client(&a, &a.0, &secrets).unwrap();
    secrets.rotate("2");
    let rotated = cache.client(&a, &a.0, &secrets).unwrap();
    assert_eq!(first.transport_id, rotated.transport_id, "pooled connections stay usable");
    assert!(!Arc::ptr_eq(first.config(ClientAlpn::Http1), rotated.config(ClientAlpn::Http1)));
    let other = cache.client(&b, &b.0, &secrets).unwrap();
    assert_ne!(first.transport_id, other.transport_id, "another cluster's connections are not shared");
}

#[test]
fn alpn_is_offered_per_use() {
    let secrets = Secrets::mesh("1");
    let mut cache = TlsCache::new();
    let owner = Arc::new(Owner(UpstreamTlsContext {
        common: CommonTlsContext { alpn_protocols: vec![], ..common() },
        sni: String::new(),
    }));
    let tls = cache.client(&owner, &owner.0, &secrets).unwrap();
    assert_eq!(tls.config(ClientAlpn::Http2).alpn_protocols, vec![b"h2".to_vec()]);
    assert_eq!(tls.config(ClientAlpn::Http1).alpn_protocols, vec![b"http/1.1".to_vec()]);
    assert!(tls.config(ClientAlpn::Tcp).alpn_protocols.is_empty());
    assert!(!tls.config(ClientAlpn::Tcp).enable_sni, "no SNI configured, none sent");

    // Istio's mTLS marker: its HTTP ALPN override.
    let istio = Arc::new(Owner(UpstreamTlsContext {
        common: CommonTlsContext { alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()], ..common() },
        sni: "outbound_.80_._.b.default.svc.cluster.local".into(),
    }));
    let tls = cache.client(&istio, &istio.0, &secrets).unwrap();
    let offered = |use_| {
        tls.config(use_).alpn_protocols.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>()
    };
    assert_eq!(offered(ClientAlpn::Http2), ["istio-h2", "istio", "h2"]);
    assert_eq!(offered(ClientAlpn::Http1), ["istio-http/1.1", "istio", "http/1.1"]);
    assert_eq!(offered(ClientAlpn::Tcp), ["istio-peer-exchange", "istio"]);
}

#[test]
fn a_missing_or_mismatched_secret_is_an_error_not_a_panic() {
    let mut secrets = Secrets::mesh("1");
    secrets.0.remove("ROOTCA");
    let owner = listener();
    let mut cache = TlsCache::new();
    let error = cache.server(&owner, &owner.0, &secrets).unwrap_err();
    assert!(matches!(&error, TlsError::SecretMissing(name) if name == "ROOTCA"), "{error}");

    let mut secrets = Secrets::mesh("1");
    let (certificate, _, _) = secrets.0.remove("default").unwrap();
    secrets.put(certificate.kind, "ROOTCA", "1");
    secrets.put(SecretKind::ValidationContext(validation("x")), "default", "1");
    let error = cache.server(&owner, &owner.0, &secrets).unwrap_err();
    assert!(matches!(error, TlsError::SecretKind { .. }), "{error}");
}

#[test]
fn a_server_config_answers_alpn_as_envoy_does() {
    let secrets = Secrets::mesh("1");
    let owner = listener();
    let tls = TlsCache::new().server(&owner, &owner.0, &secrets).unwrap();
    assert_eq!(tls.config_for(&[b"h2".to_vec()]).alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    // A client offering none of them gets no ALPN rather than a refusal, as from Envoy.
    assert!(tls.config_for(&[b"istio".to_vec()]).alpn_protocols.is_empty());
}

#[test]
fn a_certificate_file_rewritten_on_disk_rebuilds_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let write = |name: &str, text: &str, at: u64| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(at)).unwrap();
        DataSource::Filename(path)
    };
    let issue = |at: u64| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["server.test".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
        TlsCertificate {
            certificate_chain: write("cert.pem", &cert.pem(), at),
            private_key: PrivateKey::new(write("key.pem", &key.serialize_pem(), at)),
        }
    };
    let context = DownstreamTlsContext {
        common: CommonTlsContext {
            certificates: Certificates::Inline(vec![issue(1)]),
            validation: Some(Validation::Inline(CertificateValidationContext {
                trusted_ca: Some(write("ca.pem", &ca.pem(), 1)),
                ..Default::default()
            })),
            ..common()
        },
        require_client_certificate: true,
        require_sni: false,
    };
    let owner = Arc::new(Owner(context));
    let (secrets, mut cache) = (Secrets::default(), TlsCache::new());
    let first = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    let again = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    assert!(Arc::ptr_eq(&first, &again));
    issue(2); // the same paths, new contents and modification times
    let rotated = cache.server(&owner, &owner.0, &secrets).unwrap().config_for(&[]);
    assert!(!Arc::ptr_eq(&first, &rotated), "the rewritten files are read again");
}
