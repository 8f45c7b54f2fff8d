//! TLS on both sides of the proxy: rustls server and client configs built from a listener's
//! or cluster's TLS context and the secrets of the served snapshot, peer checks (the
//! webpki chain to the trusted CA, then the SAN matchers: SPIFFE identities are URI SANs),
//! the TLS inspector that reads SNI and ALPN before a filter chain is chosen, and rotation:
//! configs are cached per context and secret version, so a new secret version applies to
//! the next handshake while established connections keep theirs.
//!
//! Only TLS 1.2 and 1.3 exist here (rustls offers nothing older), with one crypto provider
//! for the whole binary (see [`provider`]).

mod accept;
mod cache;
mod client;
mod connect;
mod error;
pub mod inspector;
mod peer;
mod prefixed;
pub mod provider;
mod san;
mod secrets;
mod server;
mod source;
mod stats;
mod verifier;

pub use accept::{Accepted, Refused, accept};
pub use cache::{ClientTls, ServerTls, TlsCache};
pub use client::{ClientAlpn, unverified_client_config};
pub use connect::connect;
pub use error::TlsError;
pub use inspector::{Inspection, inspect};
pub use peer::PeerIdentity;
pub use prefixed::PrefixedStream;
pub use secrets::{SecretRef, SecretSource};
pub use source::roots;
pub use stats::{Refusal, TlsStats};

/// Envoy's ALPN names (`Http::Utility::AlpnNames`).
pub mod alpn {
    pub const HTTP2: &str = "h2";
    pub const HTTP11: &str = "http/1.1";
}
