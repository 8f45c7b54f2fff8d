//! `envoy.config.route.v3.RouteConfiguration` → [`RouteConfiguration`]. (Placeholder.)

use crate::config::error::{Result, Warnings};
use crate::config::route::RouteConfiguration;
use crate::pb::envoy::config::route::v3 as proto;

pub fn route_configuration(proto: proto::RouteConfiguration, _warnings: &mut Warnings) -> Result<RouteConfiguration> {
    Ok(RouteConfiguration { name: proto.name })
}
