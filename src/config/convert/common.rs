//! Conversions shared by every resource: addresses, durations, typed configs.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::config::address::Address;
use crate::config::error::{ConfigError, Result};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::google::protobuf as gpb;

/// `envoy.config.core.v3.Address` → [`Address`]. `resolve_dns` allows a host name in place
/// of an IP (STRICT_DNS and LOGICAL_DNS clusters); everywhere else Envoy requires an IP.
pub fn address(proto: &core::Address, resolve_dns: bool) -> Result<Address> {
    use core::address::Address as A;
    match &proto.address {
        Some(A::SocketAddress(socket)) => socket_address(socket, resolve_dns).map_err(|e| e.at("socket_address")),
        Some(A::Pipe(core::Pipe { path, mode: _ })) => {
            if path.is_empty() {
                return Err(ConfigError::new("pipe.path", "must not be empty"));
            }
            Ok(Address::Pipe(path.into()))
        }
        Some(A::EnvoyInternalAddress(internal)) => {
            internal_address(internal).map_err(|e| e.at("envoy_internal_address"))
        }
        None => Err(ConfigError::new("", "address is required")),
    }
}

/// `envoy.config.core.v3.EnvoyInternalAddress` → [`Address::Internal`].
fn internal_address(proto: &core::EnvoyInternalAddress) -> Result<Address> {
    use core::envoy_internal_address::AddressNameSpecifier;
    let core::EnvoyInternalAddress { address_name_specifier, endpoint_id } = proto;
    match address_name_specifier {
        Some(AddressNameSpecifier::ServerListenerName(name)) if !name.is_empty() => {
            Ok(Address::Internal { server_listener_name: name.clone(), endpoint_id: endpoint_id.clone() })
        }
        _ => Err(ConfigError::new("server_listener_name", "the internal listener's name is required")),
    }
}

/// `envoy.config.core.v3.SocketAddress` → [`Address`].
pub fn socket_address(proto: &core::SocketAddress, resolve_dns: bool) -> Result<Address> {
    use core::socket_address::{PortSpecifier, Protocol};
    let core::SocketAddress {
        protocol,
        address,
        resolver_name,
        // Only a listening socket uses it; the listener converter refuses it first.
        ipv4_compat: _,
        network_namespace_filepath,
        port_specifier,
    } = proto;
    if *protocol != Protocol::Tcp as i32 {
        return Err(ConfigError::new("protocol", "only TCP is supported"));
    }
    if !resolver_name.is_empty() {
        return Err(ConfigError::new("resolver_name", "custom resolvers are not supported"));
    }
    if !network_namespace_filepath.is_empty() {
        return Err(ConfigError::new("network_namespace_filepath", "not supported"));
    }
    let port = match port_specifier {
        Some(PortSpecifier::PortValue(port)) => {
            u16::try_from(*port).map_err(|_| ConfigError::new("port_value", format!("{port} is not a port")))?
        }
        Some(PortSpecifier::NamedPort(_)) => {
            return Err(ConfigError::new("named_port", "named ports are not supported"));
        }
        None => return Err(ConfigError::new("port_value", "a port is required")),
    };
    match address.parse::<IpAddr>() {
        Ok(ip) => Ok(Address::Socket(SocketAddr::new(ip, port))),
        Err(_) if resolve_dns && !address.is_empty() => Ok(Address::Dns { host: address.clone(), port }),
        Err(_) => Err(ConfigError::new("address", format!("{address:?} is not an IP address"))),
    }
}

/// `google.protobuf.Duration` → [`Duration`]; negative or out-of-range values are refused.
pub fn duration(proto: &gpb::Duration) -> Result<Duration> {
    let gpb::Duration { seconds, nanos } = *proto;
    if seconds < 0 || !(0..1_000_000_000).contains(&nanos) {
        return Err(ConfigError::new("", format!("{seconds}s {nanos}ns is not a valid non-negative duration")));
    }
    if seconds > MAX_DURATION_SECONDS {
        return Err(ConfigError::new(
            "",
            format!("duration {seconds}s is out of range (at most {MAX_DURATION_SECONDS}s)"),
        ));
    }
    Ok(Duration::new(seconds as u64, nanos as u32))
}

/// The largest duration Envoy accepts, in whole seconds: its nanoseconds must fit an `i64`
/// with a second to spare (`i64::MAX / 10⁹ − 1`). Beyond it Envoy refuses the resource; so
/// does Outrider, which also keeps every `Instant + duration` on the request path far from
/// overflowing (292 years).
pub const MAX_DURATION_SECONDS: i64 = i64::MAX / 1_000_000_000 - 1;

/// An optional duration field, named `field` for errors.
pub fn opt_duration(proto: &Option<gpb::Duration>, field: &str) -> Result<Option<Duration>> {
    proto.as_ref().map(duration).transpose().map_err(|e| e.at(field))
}

/// Decodes a `typed_config` of the expected message type and checks it against its proto's
/// constraints (`validate.rules`), as Envoy's factories do when they read one
/// (`MessageUtil::downcastAndValidate`): a violation refuses the resource that carries the
/// config, with the field path inside it (the caller prefixes its own).
pub fn unpack<M: prost::Message + prost::Name + Default>(any: &gpb::Any) -> Result<M> {
    let expected = M::type_url();
    if any.type_url != expected {
        return Err(ConfigError::new(
            "",
            format!("expected {expected}, got {}", if any.type_url.is_empty() { "no type" } else { &any.type_url }),
        ));
    }
    let message =
        M::decode(any.value.as_slice()).map_err(|e| ConfigError::new("", format!("cannot decode {expected}: {e}")))?;
    crate::pb::pgv::check_extension(type_name(&expected), &any.value).map_err(|violation| {
        ConfigError::new(violation.path, format!("proto constraint validation failed: {}", violation.reason))
    })?;
    Ok(message)
}

/// The message name of a type URL: `type.googleapis.com/envoy.a.B` → `envoy.a.B`.
/// A `google.protobuf.Struct` in its JSON form.
pub fn struct_to_json(value: &gpb::Struct) -> std::result::Result<serde_json::Value, crate::pb::json::JsonError> {
    crate::pb::json::to_value("google.protobuf.Struct", &prost::Message::encode_to_vec(value))
}

pub fn type_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// `items` without spare capacity. Collecting fallible conversions into a `Vec` starts it
/// at four slots whatever the count (the iterator cannot say how many will succeed): a
/// virtual host's one route kept four route-sized slots, over thousands of virtual hosts.
pub fn exact<T>(mut items: Vec<T>) -> Vec<T> {
    items.shrink_to_fit();
    items
}

/// Reads a `google.protobuf.UInt32Value`, falling back to `default`.
pub fn u32_or(value: &Option<gpb::UInt32Value>, default: u32) -> u32 {
    value.as_ref().map_or(default, |v| v.value)
}

/// Reads a `google.protobuf.UInt64Value`, falling back to `default`.
pub fn u64_or(value: &Option<gpb::UInt64Value>, default: u64) -> u64 {
    value.as_ref().map_or(default, |v| v.value)
}

/// Reads a `google.protobuf.BoolValue`, falling back to `default`.
pub fn bool_or(value: &Option<gpb::BoolValue>, default: bool) -> bool {
    value.as_ref().map_or(default, |v| v.value)
}

/// Reads a `envoy.type.v3.Percent` (0–100), falling back to `default`.
pub fn percent_or(value: &Option<crate::pb::envoy::r#type::v3::Percent>, default: f64, field: &str) -> Result<f64> {
    match value {
        None => Ok(default),
        Some(p) if (0.0..=100.0).contains(&p.value) => Ok(p.value),
        Some(p) => Err(ConfigError::new(field, format!("{} is not a percentage in [0, 100]", p.value))),
    }
}

/// An IP prefix from its textual address and length (0 when unset, as in Envoy).
pub fn cidr(address_prefix: &str, prefix_len: Option<u32>) -> Result<crate::config::listener::CidrRange> {
    let address: std::net::IpAddr = address_prefix
        .parse()
        .map_err(|_| ConfigError::new("address_prefix", format!("{address_prefix:?} is not an IP address")))?;
    let len = prefix_len.unwrap_or(0);
    u8::try_from(len)
        .ok()
        .and_then(|len| crate::config::listener::CidrRange::new(address, len))
        .ok_or_else(|| ConfigError::new("prefix_len", format!("{len} is too long for {address_prefix}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_up_to_envoys_maximum_are_accepted() {
        let largest = gpb::Duration { seconds: MAX_DURATION_SECONDS, nanos: 999_999_999 };
        assert_eq!(duration(&largest).unwrap(), Duration::new(9_223_372_035, 999_999_999));
        for seconds in [MAX_DURATION_SECONDS + 1, 1_000_000_000_000_000, i64::MAX] {
            let error = duration(&gpb::Duration { seconds, nanos: 0 }).unwrap_err();
            assert!(error.to_string().contains("out of range"), "{error}");
        }
        let error = opt_duration(&Some(gpb::Duration { seconds: i64::MAX, nanos: 0 }), "timeout").unwrap_err();
        assert_eq!(error.path(), "timeout");
    }
}
