//! Protobuf messages: Envoy's and xds' come from `envoy-types`; ORCA, the echo service and
//! Istio's filter configs are Outrider's own (see
//! `proto/`). `json` speaks protobuf's JSON mapping for all of them,
//! which is how Envoy's bootstrap files and `/config_dump` are written.

pub mod json;
pub mod pgv;

pub use envoy_types::pb::envoy;
pub use envoy_types::pb::google;
pub use envoy_types::pb::opentelemetry;

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
    pub mod istio {
        pub mod v1 {
            pub mod auth {
                tonic::include_proto!("istio.v1.auth");
            }
        }
        pub mod workload {
            tonic::include_proto!("istio.workload");
        }
        pub mod networking {
            pub mod nds {
                pub mod v1 {
                    tonic::include_proto!("istio.networking.nds.v1");
                }
            }
        }
        pub mod envoy {
            pub mod config {
                pub mod filter {
                    pub mod http {
                        pub mod alpn {
                            pub mod v2alpha1 {
                                tonic::include_proto!("istio.envoy.config.filter.http.alpn.v2alpha1");
                            }
                        }
                    }
                }
            }
        }
    }
    pub mod stats {
        tonic::include_proto!("stats");
    }
    pub mod io {
        pub mod istio {
            pub mod http {
                pub mod peer_metadata {
                    tonic::include_proto!("io.istio.http.peer_metadata");
                }
            }
        }
    }
    pub mod envoy_contrib {
        pub mod envoy {
            pub mod extensions {
                pub mod load_balancing_policies {
                    pub mod peak_ewma {
                        pub mod v3alpha {
                            tonic::include_proto!("envoy.extensions.load_balancing_policies.peak_ewma.v3alpha");
                        }
                    }
                }
            }
        }
    }
    pub mod envoy_tcp {
        pub mod envoy {
            pub mod tcp {
                pub mod metadataexchange {
                    pub mod config {
                        tonic::include_proto!("envoy.tcp.metadataexchange.config");
                    }
                }
            }
        }
    }
    #[cfg(feature = "testkit")]
    pub mod outrider {
        pub mod echo {
            pub mod v1 {
                tonic::include_proto!("outrider.echo.v1");
            }
        }
    }
}

/// `envoy.extensions.load_balancing_policies.peak_ewma.v3alpha`: Envoy's contrib peak-EWMA
/// policy config.
pub use own::envoy_contrib::envoy::extensions::load_balancing_policies::peak_ewma::v3alpha as envoy_peak_ewma;
/// `envoy.tcp.metadataexchange.config`: Istio's TCP metadata exchange filter config.
pub use own::envoy_tcp::envoy::tcp::metadataexchange::config as istio_tcp_metadata_exchange;
/// `io.istio.http.peer_metadata`: Istio's HTTP peer metadata exchange filter config.
pub use own::io::istio::http::peer_metadata as istio_peer_metadata;
/// `istio.envoy.config.filter.http.alpn.v2alpha1`: Istio's `istio.alpn` filter config.
pub use own::istio::envoy::config::filter::http::alpn::v2alpha1 as istio_alpn;
/// `istio.networking.nds.v1`: istiod's name table for the DNS proxy (NDS).
pub use own::istio::networking::nds::v1 as istio_nds;
/// `istio.v1.auth`: istiod's certificate service (`IstioCertificateService`).
pub use own::istio::v1::auth as istio_ca;
/// `istio.workload`: istiod's workload metadata (WDS), for telemetry's peer discovery.
pub use own::istio::workload as istio_workload;
/// `outrider.echo.v1`: the echo service that tests, the demo and benches use as a backend.
#[cfg(feature = "testkit")]
pub use own::outrider::echo::v1 as echo;
/// `stats`: Istio's `istio.stats` filter config (`stats.PluginConfig`).
pub use own::stats as istio_stats;
/// `xds.data.orca.v3`: Outrider's wire-compatible ORCA load report.
pub use own::xds::data::orca::v3 as orca;
/// `xds.service.orca.v3`: the ORCA out-of-band service.
pub use own::xds::service::orca::v3 as orca_service;
