//! `envoy.config.listener.v3.Listener` → [`Listener`]. (Placeholder.)

use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::Listener;
use crate::pb::envoy::config::listener::v3 as proto;

pub fn listener(proto: proto::Listener, _warnings: &mut Warnings) -> Result<Listener> {
    let address = proto.address.as_ref().ok_or_else(|| ConfigError::new("address", "is required"))?;
    let address = super::common::address(address, false).map_err(|e| e.at("address"))?;
    Ok(Listener { name: proto.name, address })
}
