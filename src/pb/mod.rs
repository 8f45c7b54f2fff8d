//! Protobuf messages: Envoy's and xds' come from `envoy-types`; ORCA and the echo service
//! are Outrider's own (see `proto/`). `json` speaks protobuf's JSON mapping for all of them,
//! which is how Envoy's bootstrap files and `/config_dump` are written.

pub mod json;
pub mod pgv;

pub use envoy_types::pb::envoy;
pub use envoy_types::pb::google;

/// Outrider's own protos, nested by package because the generated code refers to its
/// siblings by relative paths.
mod own {
    pub mod xds {
        pub mod data {
            pub mod orca {
                pub mod v3 {
                    tonic::include_proto!("xds.data.orca.v3");
                }
            }
        }
        pub mod service {
            pub mod orca {
                pub mod v3 {
                    tonic::include_proto!("xds.service.orca.v3");
                }
            }
        }
    }
    pub mod outrider {
        pub mod echo {
            pub mod v1 {
                tonic::include_proto!("outrider.echo.v1");
            }
        }
    }
}

/// `outrider.echo.v1`: the echo service that tests, the demo and benches use as a backend.
pub use own::outrider::echo::v1 as echo;
/// `xds.data.orca.v3`: Outrider's wire-compatible ORCA load report.
pub use own::xds::data::orca::v3 as orca;
/// `xds.service.orca.v3`: the ORCA out-of-band service.
pub use own::xds::service::orca::v3 as orca_service;
