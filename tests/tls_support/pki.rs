//! Certificates made in the test: a CA, and workload leaves whose identity is a SPIFFE URI
//! SAN (with `server.test` as DNS SAN so that plain TLS clients accept them too).

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The trust domain of every identity here.
pub const TRUST_DOMAIN: &str = "spiffe://cluster.local";

pub fn spiffe(service_account: &str) -> String {
    format!("{TRUST_DOMAIN}/ns/default/sa/{service_account}")
}

/// A certificate authority: its certificate, and what signs in its name.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
}

/// A workload certificate and its key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self { pem: cert.pem(), der: cert.der().clone(), issuer: Issuer::new(params, key) }
    }

    /// A CA made elsewhere, from its certificate and its PKCS #8 key (PEM): a peer's test
    /// root, whose certificates the peer trusts.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Self {
        let key = KeyPair::from_pem(key_pem).unwrap();
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).unwrap();
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        Self { issuer, pem: cert_pem.to_owned(), der }
    }

    pub fn pem(&self) -> String {
        self.pem.clone()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.der.clone()
    }

    /// A certificate for `spiffe_id`, valid from 1975 to 4096.
    pub fn leaf(&self, spiffe_id: &str) -> Leaf {
        self.leaf_with(spiffe_id, |_| {})
    }

    /// A server certificate for the DNS name `dns` alone (istiod's serving certificate).
    pub fn dns_leaf(&self, dns: &str) -> Leaf {
        self.leaf_with("spiffe://unused", |params| {
            params.subject_alt_names = vec![SanType::DnsName(dns.try_into().unwrap())];
        })
    }

    /// Signs a PEM CSR as a CA would: its public key and SANs, valid from now for
    /// `lifetime`. `Err` when it is not a CSR.
    pub fn sign_csr(&self, csr_pem: &str, lifetime: std::time::Duration) -> Result<String, String> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| e.to_string())?;
        let now = time::OffsetDateTime::now_utc();
        csr.params.not_before = now;
        csr.params.not_after = now + lifetime;
        csr.params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        csr.params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        csr.signed_by(&self.issuer).map(|cert| cert.pem()).map_err(|e| e.to_string())
    }

    /// A certificate for `spiffe_id` that expired in 2001.
    pub fn expired_leaf(&self, spiffe_id: &str) -> Leaf {
        self.leaf_with(spiffe_id, |params| {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    /// A certificate made of `params` for `key`, signed by this CA (a test that needs a
    /// subject or SANs of its own).
    pub fn sign(&self, params: CertificateParams, key: KeyPair) -> Leaf {
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    fn leaf_with(&self, spiffe_id: &str, adjust: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names =
            vec![SanType::URI(spiffe_id.try_into().unwrap()), SanType::DnsName("server.test".try_into().unwrap())];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        adjust(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}

impl Leaf {
    pub fn der(&self) -> CertificateDer<'static> {
        self.der.clone()
    }

    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// istiod's plugged-in CA (`ROOT_CA_DIR`): a root and the intermediate istiod signs with, in
/// the directory's four files (`root-cert.pem`, `ca-cert.pem`, `ca-key.pem`,
/// `cert-chain.pem`). Returns the root's PEM.
pub fn write_istio_ca_dir(dir: &std::path::Path) -> String {
    let ca_params = |name: &str, path_len: Option<u8>| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(path_len.map_or(BasicConstraints::Unconstrained, BasicConstraints::Constrained));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params
    };
    let root = rcgen::CertifiedIssuer::self_signed(ca_params("Outrider test root", None), KeyPair::generate().unwrap())
        .unwrap();
    let key = KeyPair::generate().unwrap();
    let intermediate = ca_params("Outrider test istiod CA", Some(0)).signed_by(&key, &root).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("root-cert.pem"), root.pem()).unwrap();
    std::fs::write(dir.join("ca-cert.pem"), intermediate.pem()).unwrap();
    std::fs::write(dir.join("ca-key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("cert-chain.pem"), format!("{}{}", intermediate.pem(), root.pem())).unwrap();
    root.pem()
}
