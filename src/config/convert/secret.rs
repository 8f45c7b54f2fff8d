//! `envoy.extensions.transport_sockets.tls.v3.Secret` → [`Secret`]. (Placeholder.)

use crate::config::error::{Result, Warnings};
use crate::config::secret::Secret;
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as proto;

pub fn secret(proto: proto::Secret, _warnings: &mut Warnings) -> Result<Secret> {
    Ok(Secret { name: proto.name })
}
