use super::*;
use rcgen::{BasicConstraints, IsCa, Issuer};
use x509_parser::prelude::FromDer;

const IDENTITY: &str = "spiffe://cluster.local/ns/shop/sa/cart";

/// A root CA and a leaf it signed for `key` with `uri` as SAN: the PEM chain [leaf, root].
fn chain(key: &KeyPair, uri: &str) -> Vec<String> {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root = ca.clone().self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = vec![SanType::URI(Ia5String::try_from(uri).unwrap())];
    let leaf = leaf.signed_by(key, &issuer).unwrap();
    vec![leaf.pem(), root.pem()]
}

fn key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
}

#[test]
fn the_csr_names_the_identity_alone() {
    let key = key();
    let pem = csr(&key, IDENTITY).unwrap();
    let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(&der.contents).unwrap();
    let info = &request.certification_request_info;
    assert_eq!(info.subject.iter().count(), 0, "empty subject");
    assert_eq!(info.subject_pki.raw, key.subject_public_key_info().as_slice());
    let sans: Vec<String> = request
        .requested_extensions()
        .into_iter()
        .flatten()
        .filter_map(|e| match e {
            x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) => Some(san),
            _ => None,
        })
        .flat_map(|san| san.general_names.iter().map(|n| n.to_string()))
        .collect();
    assert_eq!(sans, [format!("URI({IDENTITY})")]);
}

#[test]
fn an_answer_for_this_key_and_identity_is_taken_and_the_root_kept_apart() {
    let key = key();
    let chain = chain(&key, IDENTITY);
    let issued = issued(&key, IDENTITY, &chain, std::path::Path::new("/nonexistent")).unwrap();
    assert_eq!(issued.chain_pem.trim(), chain[0].trim(), "the leaf is served, the root is not");
    assert_eq!(issued.root_pem.trim(), chain[1].trim());
    assert!(issued.not_after > issued.not_before);
    assert!(issued.key_pem.contains("PRIVATE KEY"));
}

#[test]
fn answers_for_another_identity_or_key_or_nothing_are_refused() {
    let key = key();
    let other = chain(&key, "spiffe://cluster.local/ns/shop/sa/admin");
    let err = issued(&key, IDENTITY, &other, std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(err.to_string().contains("not spiffe://cluster.local/ns/shop/sa/cart"), "{err}");
    let theirs = chain(&self::key(), IDENTITY);
    let err = issued(&key, IDENTITY, &theirs, std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(err.to_string().contains("another key"), "{err}");
    let err = issued(&key, IDENTITY, &[], std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(err.to_string().contains("empty chain"), "{err}");
    let err = issued(&key, IDENTITY, &["junk".into()], std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(err.to_string().contains("not PEM"), "{err}");
}
