//! Listeners: where Outrider accepts connections and what it does with them.
//! (Placeholder: the full model arrives with the listener converter.)

use super::address::Address;

#[derive(Debug, Clone, PartialEq)]
pub struct Listener {
    pub name: String,
    pub address: Address,
}

impl Listener {
    /// The RDS route configurations this listener's HTTP connection managers refer to.
    pub fn route_config_names(&self) -> Vec<&str> {
        Vec::new()
    }

    /// The SDS secrets this listener's downstream TLS refers to.
    pub fn secret_names(&self) -> Vec<&str> {
        Vec::new()
    }
}
