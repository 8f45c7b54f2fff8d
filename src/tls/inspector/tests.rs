use std::sync::Arc;

use super::*;

/// A real ClientHello, as rustls sends it.
fn client_hello(sni: &str, alpn: &[&str]) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore::empty();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let name = rustls_pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut bytes = Vec::new();
    connection.write_tls(&mut bytes).unwrap();
    bytes
}

#[test]
fn sni_and_alpn_come_from_the_client_hello() {
    let hello = client_hello("outbound_.8080_._.reviews.default.svc.cluster.local", &["istio-h2", "h2"]);
    let expected = Inspection::Tls {
        server_name: Some("outbound_.8080_._.reviews.default.svc.cluster.local".into()),
        application_protocols: vec!["istio-h2".into(), "h2".into()],
    };
    assert_eq!(parse(&hello), Parse::Done(expected));
}

#[test]
fn every_prefix_of_a_client_hello_needs_more() {
    let hello = client_hello("example.com", &[]);
    for end in 0..hello.len() {
        assert_eq!(parse(&hello[..end]), Parse::NeedMore, "prefix of {end} bytes");
    }
}

#[test]
fn a_client_hello_split_over_records_is_reassembled() {
    let hello = client_hello("example.com", &["http/1.1"]);
    let message = &hello[5..];
    let (a, b) = message.split_at(40);
    let mut split = Vec::new();
    for part in [a, b] {
        split.extend_from_slice(&[22, 3, 1]);
        split.extend_from_slice(&(part.len() as u16).to_be_bytes());
        split.extend_from_slice(part);
    }
    assert_eq!(parse(&split), parse(&hello));
    assert_eq!(parse(&split[..split.len() - 1]), Parse::NeedMore);
}

#[test]
fn plaintext_is_raw_buffer_from_its_first_byte() {
    assert_eq!(parse(b"G"), Parse::Done(Inspection::NotTls));
    assert_eq!(parse(b"PRI * HTTP/2.0\r\n"), Parse::Done(Inspection::NotTls));
    assert_eq!(parse(&[22, 9]), Parse::Done(Inspection::NotTls), "not a TLS record version");
    assert_eq!(parse(&[22, 3, 3, 0, 4, 2, 0, 0, 0]), Parse::Done(Inspection::NotTls), "not a ClientHello");
}

#[test]
fn a_malformed_client_hello_is_raw_buffer() {
    // A ClientHello of 3 bytes cannot hold its version and random.
    assert_eq!(parse(&[22, 3, 1, 0, 7, 1, 0, 0, 3, 3, 3, 0]), Parse::Done(Inspection::NotTls));
}

#[tokio::test]
async fn inspect_reads_until_the_client_hello_ends_and_keeps_the_bytes() {
    let hello = client_hello("example.com", &["h2"]);
    let (mut client, mut server) = tokio::io::duplex(64);
    let sent = hello.clone();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        for chunk in sent.chunks(7) {
            client.write_all(chunk).await.unwrap();
        }
        client
    });
    let mut buffer = Vec::new();
    let inspection = inspect(&mut server, &mut buffer).await.unwrap();
    assert!(matches!(inspection, Inspection::Tls { .. }));
    assert_eq!(buffer, hello);
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn a_connection_closed_mid_hello_is_an_error() {
    let hello = client_hello("example.com", &[]);
    let (mut client, mut server) = tokio::io::duplex(4096);
    {
        use tokio::io::AsyncWriteExt;
        client.write_all(&hello[..20]).await.unwrap();
    }
    drop(client);
    let error = inspect(&mut server, &mut Vec::new()).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}
