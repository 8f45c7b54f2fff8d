//! Envoy's bootstrap file. (Placeholder.)
