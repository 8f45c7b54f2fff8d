//! TLS contexts of listeners (downstream) and clusters (upstream), with their certificates
//! given inline or by SDS secret name. (Placeholder: the full model arrives with the TLS
//! converter.)

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommonTlsContext {
    /// SDS secret names of the certificates to present.
    pub certificate_sds_names: Vec<String>,
    /// SDS secret name of the validation context, if any.
    pub validation_sds_name: Option<String>,
    pub alpn_protocols: Vec<String>,
}

/// A cluster's `envoy.transport_sockets.tls` configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpstreamTlsContext {
    pub common: CommonTlsContext,
    pub sni: String,
}

/// A listener filter chain's `envoy.transport_sockets.tls` configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DownstreamTlsContext {
    pub common: CommonTlsContext,
    pub require_client_certificate: bool,
}

impl CommonTlsContext {
    /// The SDS secrets this context refers to.
    pub fn secret_names(&self) -> Vec<&str> {
        self.certificate_sds_names.iter().map(String::as_str).chain(self.validation_sds_name.as_deref()).collect()
    }
}
