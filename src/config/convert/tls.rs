//! TLS transport socket configs → [`UpstreamTlsContext`] / [`DownstreamTlsContext`].
//! (Placeholder.)

use crate::config::error::{Result, Warnings};
use crate::config::tls::{DownstreamTlsContext, UpstreamTlsContext};
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as proto;

pub fn upstream_tls_context(proto: proto::UpstreamTlsContext, _warnings: &mut Warnings) -> Result<UpstreamTlsContext> {
    Ok(UpstreamTlsContext { sni: proto.sni, ..Default::default() })
}

pub fn downstream_tls_context(
    _proto: proto::DownstreamTlsContext,
    _warnings: &mut Warnings,
) -> Result<DownstreamTlsContext> {
    Ok(DownstreamTlsContext::default())
}
