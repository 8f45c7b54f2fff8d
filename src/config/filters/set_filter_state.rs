//! `envoy.filters.http.set_filter_state`: filter state objects set from the request's
//! headers and connection (Istio's `connect_authority` on the HBONE terminating listener
//! sets the tunnel's destination and peer identity this way, shared with the upstream).

use crate::config::format::Piece;

/// The filter's `on_request_headers` entries, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct SetFilterState {
    pub on_request_headers: Vec<FilterStateValue>,
}

/// The network filter's values, set in order on each new connection (its
/// `on_new_connection`, then `on_downstream_tls_handshake`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSetFilterState {
    pub on_new_connection: Vec<FilterStateValue>,
}

/// One object to set.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterStateValue {
    /// `object_key`.
    pub key: String,
    /// `format_string` (a text format of request-time commands).
    pub format: Vec<Piece>,
    /// `read_only`: a later filter may not replace it.
    pub read_only: bool,
    pub shared_with_upstream: SharedWithUpstream,
    /// `skip_if_empty`: an empty value sets nothing.
    pub skip_if_empty: bool,
}

/// `shared_with_upstream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedWithUpstream {
    None,
    Once,
    Transitive,
}
