//! The connection manager's request-edge fields: each is converted into what the proxy
//! reads, or refused with its path.

use serde_json::json;

use super::{convert, error, hcm, hcm_of, inline_routes, router};
use crate::config::listener::http_connection_manager::{
    ClientCertDetails, ForwardClientCertDetails, InternalAddresses, StripPort,
};

const PATH: &str = "filter_chains[0].filters[0].typed_config";

#[test]
fn internal_address_config_unset_set_and_with_ranges() {
    let base = || json!({"route_config": inline_routes(), "http_filters": [router()]});
    let unset = convert(hcm(base())).unwrap();
    assert_eq!(hcm_of(&unset).internal_address, InternalAddresses::None);

    let mut value = base();
    value["internal_address_config"] = json!({"unix_sockets": true});
    let set = convert(hcm(value)).unwrap();
    assert_eq!(hcm_of(&set).internal_address, InternalAddresses::Configured { cidr_ranges: Vec::new() });

    let mut value = base();
    value["internal_address_config"] = json!({"cidr_ranges": [{"address_prefix": "10.1.0.0", "prefix_len": 16}]});
    let ranges = convert(hcm(value)).unwrap();
    assert!(hcm_of(&ranges).internal_address.contains("10.1.2.3".parse().unwrap()));
    assert!(!hcm_of(&ranges).internal_address.contains("10.2.0.1".parse().unwrap()));

    let mut value = base();
    value["internal_address_config"] = json!({"cidr_ranges": [{"address_prefix": "10.1.0.0", "prefix_len": 40}]});
    let err = error(convert(hcm(value)));
    assert_eq!(err.path(), format!("{PATH}.internal_address_config.cidr_ranges[0].prefix_len"));
}

#[test]
fn client_cert_details_and_host_normalization() {
    let value = json!({"route_config": inline_routes(), "http_filters": [router()],
        "forward_client_cert_details": "APPEND_FORWARD",
        "set_current_client_cert_details": {"subject": true, "dns": true, "uri": true},
        "strip_trailing_host_dot": true, "strip_any_host_port": true});
    let listener = convert(hcm(value)).unwrap();
    let h = hcm_of(&listener);
    assert_eq!(h.forward_client_cert_details, ForwardClientCertDetails::AppendForward);
    let details = ClientCertDetails { subject: true, dns: true, uri: true, cert: false, chain: false };
    assert_eq!(h.set_current_client_cert_details, details);
    assert!(h.strip_trailing_host_dot);
    assert_eq!(h.strip_port, StripPort::Any);

    for (field, details) in [("issuer", json!({"issuer": true})), ("format", json!({"format": "JSON"}))] {
        let value = json!({"route_config": inline_routes(), "http_filters": [router()],
            "forward_client_cert_details": "SANITIZE_SET", "set_current_client_cert_details": details});
        let err = error(convert(hcm(value)));
        assert_eq!(err.path(), format!("{PATH}.set_current_client_cert_details.{field}"), "{err}");
    }
}
