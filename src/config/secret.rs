//! Secrets delivered by SDS (or inline): certificates and validation contexts.
//! (Placeholder: the full model arrives with the secret converter.)

#[derive(Debug, Clone, PartialEq)]
pub struct Secret {
    pub name: String,
}
