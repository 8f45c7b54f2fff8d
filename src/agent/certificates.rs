//! The workload certificate's life: issued at start, renewed when its grace period begins
//! (pilot-agent's rule: when `grace_ratio ± jitter` of the time it had left on arrival is
//! left), retried with backoff when the CA cannot answer, and published as the SDS secrets `default` (key and
//! chain) and `ROOTCA` (the trust anchor) that Istio's bootstrap asks its agent for. A
//! renewal replaces the secrets in one publication: connections already open keep the
//! certificate they were made with, new handshakes take the new one, so no request fails.

use std::path::Path;
use std::time::{Duration, SystemTime};

use prost::Message;
use rand::{Rng, SeedableRng};

use super::ca_client::{CaClient, Issued};
use super::settings::AgentSettings;
use crate::core::backoff::Backoff;
use crate::core::shutdown::Signal;
use crate::pb::envoy::config::core::v3::{DataSource, data_source};
use crate::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, Secret, TlsCertificate, secret,
};
use crate::pb::google::protobuf::Any;
use crate::xds::server::XdsServer;

/// The secret names Istio's bootstrap asks the agent for.
pub const WORKLOAD_SECRET: &str = "default";
pub const ROOT_SECRET: &str = "ROOTCA";
const SECRET_TYPE: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/// When to renew a certificate: once `ratio + jitter` (`jitter` drawn from
/// ±`settings.grace_jitter`) of the time it had left when it arrived is left, as
/// pilot-agent's secret cache does.
pub fn renew_at(issued: &Issued, settings: &AgentSettings, rng: &mut impl Rng) -> SystemTime {
    let lifetime = issued.not_after.duration_since(issued.received).unwrap_or_default();
    let jitter = if settings.grace_jitter > 0.0 {
        rng.random_range(-settings.grace_jitter..=settings.grace_jitter)
    } else {
        0.0
    };
    let grace = lifetime.mul_f64((settings.grace_ratio + jitter).clamp(0.0, 1.0));
    issued.not_after.checked_sub(grace).unwrap_or(issued.received)
}

/// Publishes `issued` as the two SDS secrets.
pub fn publish(sds: &XdsServer, issued: &Issued) {
    let inline = |pem: &str| {
        Some(DataSource {
            specifier: Some(data_source::Specifier::InlineBytes(pem.as_bytes().to_vec())),
            ..Default::default()
        })
    };
    let workload = Secret {
        name: WORKLOAD_SECRET.into(),
        r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: inline(&issued.chain_pem),
            private_key: inline(&issued.key_pem),
            ..Default::default()
        })),
    };
    let root = Secret {
        name: ROOT_SECRET.into(),
        r#type: Some(secret::Type::ValidationContext(CertificateValidationContext {
            trusted_ca: inline(&issued.root_pem),
            ..Default::default()
        })),
    };
    let any = |s: &Secret| Any { type_url: SECRET_TYPE.into(), value: s.encode_to_vec() };
    sds.set_resources(SECRET_TYPE, vec![(WORKLOAD_SECRET.into(), any(&workload)), (ROOT_SECRET.into(), any(&root))]);
}

/// Writes the certificate where `OUTPUT_CERTS` asks (pilot-agent's file names), the key
/// readable by its owner only.
///
/// Each file is written beside its name and renamed over it. The file written is always
/// a new one with its mode set explicitly: opening a stale temporary file left by an
/// earlier run would keep that file's mode (and owner), since `mode` applies only when
/// `open` creates the file, and a stale 0644 file would leave the key readable by all.
fn write_out(dir: &Path, issued: &Issued) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::create_dir_all(dir)?;
    let write = |name: &str, text: &str, mode: u32| -> std::io::Result<()> {
        let tmp = dir.join(format!(".{name}.tmp"));
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // `create_new`: O_EXCL, which also refuses to follow a symbolic link put there.
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        // The umask may have taken bits away from `mode`; set exactly it, before the
        // secret is written.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(tmp, dir.join(name))
    };
    write("key.pem", &issued.key_pem, 0o600)?;
    write("cert-chain.pem", &issued.chain_pem, 0o644)?;
    write("root-cert.pem", &issued.root_pem, 0o644)
}

/// Keeps a valid certificate published until `shutdown`: issue, publish, sleep until the
/// renewal time, again. Failures are logged and retried with backoff (from 250 ms,
/// doubling up to 10 s: a pod without a certificate serves nothing, so the wait stays
/// short), while the last certificate stays published.
pub async fn rotate(client: CaClient, settings: std::sync::Arc<AgentSettings>, sds: XdsServer, shutdown: Signal) {
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(10), rng.random());
    let stop = shutdown.triggered();
    tokio::pin!(stop);
    loop {
        let wait = match client.issue().await {
            Ok(issued) => {
                backoff.reset();
                publish(&sds, &issued);
                if let Some(dir) = &settings.output_dir
                    && let Err(e) = write_out(dir, &issued)
                {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not write the workload certificate");
                }
                let at = renew_at(&issued, &settings, &mut rng);
                let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                tracing::info!(identity = %settings.identity, renew_in_s = wait.as_secs(), "workload certificate issued");
                wait
            }
            Err(e) => {
                let wait = backoff.next_delay();
                tracing::warn!(ca = %settings.ca_address, error = %e, retry_in_ms = wait.as_millis() as u64, "no workload certificate");
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = &mut stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate received at its `not_before` + 120 s (istiod's backdating), valid for
    /// `lifetime` from then.
    fn issued(lifetime: u64) -> Issued {
        let not_before = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let received = not_before + Duration::from_secs(120);
        Issued {
            key_pem: String::new(),
            chain_pem: String::new(),
            root_pem: String::new(),
            not_before,
            not_after: received + Duration::from_secs(lifetime),
            received,
        }
    }

    fn settings(ratio: f64, jitter: f64) -> AgentSettings {
        let env = [("POD_NAMESPACE", "ns"), ("SERVICE_ACCOUNT", "sa")];
        let mut s = AgentSettings::from_env(&env.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()).unwrap();
        (s.grace_ratio, s.grace_jitter) = (ratio, jitter);
        s
    }

    #[test]
    fn the_key_is_written_0600_whatever_is_already_on_disk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("outrider-output-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A stale temporary file and a stale key, both readable by all.
        for stale in [".key.pem.tmp", "key.pem"] {
            std::fs::write(dir.join(stale), "stale").unwrap();
            std::fs::set_permissions(dir.join(stale), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let cert = Issued { key_pem: "KEY".into(), chain_pem: "CHAIN".into(), root_pem: "ROOT".into(), ..issued(1000) };
        write_out(&dir, &cert).unwrap();
        let mode = |name: &str| std::fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("key.pem"), 0o600);
        assert_eq!(std::fs::read_to_string(dir.join("key.pem")).unwrap(), "KEY");
        assert_eq!(mode("cert-chain.pem"), 0o644);
        assert_eq!(mode("root-cert.pem"), 0o644);
        assert!(!dir.join(".key.pem.tmp").exists());
        // Written again over a key someone made readable: 0600 again.
        std::fs::set_permissions(dir.join("key.pem"), std::fs::Permissions::from_mode(0o666)).unwrap();
        write_out(&dir, &cert).unwrap();
        assert_eq!(mode("key.pem"), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renewal_starts_when_the_grace_period_begins() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let cert = issued(1000);
        assert_eq!(renew_at(&cert, &settings(0.5, 0.0), &mut rng), cert.received + Duration::from_secs(500));
        assert_eq!(renew_at(&cert, &settings(0.0, 0.0), &mut rng), cert.not_after);
        assert_eq!(renew_at(&cert, &settings(1.0, 0.0), &mut rng), cert.received);
        for _ in 0..100 {
            let at = renew_at(&cert, &settings(0.5, 0.01), &mut rng);
            let after = at.duration_since(cert.received).unwrap();
            assert!((490..=510).contains(&after.as_secs()), "{after:?}");
        }
    }
}
