//! Decoding and validating one response's resources, resource by resource, as Envoy does.
//!
//! Envoy applies what it can of a response and NACKs the rest, in one of two ways:
//!
//! - LDS and CDS (the listener and cluster managers) try every resource: the valid ones
//!   are added or updated, each invalid one keeps its previous version (a new invalid one
//!   is simply absent), and the NACK lists every invalid one.
//! - RDS, EDS and SDS deliver each resource to its own subscription, one after the other,
//!   and stop at the first that fails: those before it are applied, it and those after it
//!   keep their previous versions, and the NACK carries that one failure. Envoy's order is
//!   its internal order of subscriptions, which nothing specifies; Outrider takes the
//!   response's order, which is one of the orders Envoy may take.
//!
//! A problem with the response itself (a resource of another type, a name given twice in a
//! Delta response) rejects it whole, before anything is applied, as Envoy's subscription
//! layer does. So does a resource that breaks a constraint of its proto (`validate.rules`:
//! an empty name, a zero `connect_timeout`, a route without `match`) or does not decode:
//! Envoy finds those while decoding the response, before any resource reaches a manager,
//! and NACKs the response with that one resource's error.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::SystemTime;

use bytes::Bytes;

use crate::config::convert::{constraints, decode_resource, resource_name};
use crate::config::{Address, Ignored, Listener, Resource, ResourceType, Warnings};
use crate::pb::pgv::Kept;
use crate::store::{ConfigState, Raw, Versioned};

/// A resource as it came off the wire.
pub struct Incoming {
    /// Delta carries the name beside the resource; SotW does not.
    pub name: Option<String>,
    pub version: String,
    pub bytes: Bytes,
}

/// One resource refused, and why (its field path and the problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub name: String,
    pub error: String,
}

/// What to do with one response: apply `accepted`, NACK if anything was `rejected`.
#[derive(Debug, Default)]
pub struct Verdict {
    pub accepted: Vec<Versioned<Resource>>,
    pub rejected: Vec<Rejected>,
    /// Every resource name the response carries, valid or not (SotW LDS/CDS remove what
    /// is held but not named; an invalid resource is still named, so it stays).
    pub names: BTreeSet<String>,
    /// The response was refused as a whole (a resource broke its proto's constraints):
    /// nothing of it is applied, and nothing is removed for not being named.
    pub refused: bool,
}

impl Verdict {
    /// The NACK's `error_detail` message, worded as Envoy words it, or `None` to ACK.
    pub fn error_detail(&self, resource_type: ResourceType) -> Option<String> {
        if self.refused {
            // Envoy's decoding error: the one resource, without the managers' wording.
            return self.rejected.first().map(|r| format!("{}: {}", r.name, r.error));
        }
        error_detail(resource_type, &self.rejected)
    }
}

/// How a type's resources are taken from a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    /// Every valid resource is applied (LDS, CDS).
    EachResource,
    /// Resources are applied in order until the first invalid one (RDS, EDS, SDS).
    UntilFirstFailure,
}

pub fn acceptance(resource_type: ResourceType) -> Acceptance {
    match resource_type {
        ResourceType::Listener | ResourceType::Cluster => Acceptance::EachResource,
        ResourceType::RouteConfiguration | ResourceType::ClusterLoadAssignment | ResourceType::Secret => {
            Acceptance::UntilFirstFailure
        }
    }
}

/// Converts the resources of a response and decides, per resource, what is applied.
pub fn validate(
    state: Option<&ConfigState>,
    resource_type: ResourceType,
    incoming: Vec<Incoming>,
    warned: &mut HashSet<Ignored>,
) -> Verdict {
    validate_kept(&mut Kept::default(), state, resource_type, incoming, warned)
}

/// [`validate`] with the constraint validators `kept` holds from earlier responses.
pub fn validate_kept(
    kept: &mut Kept,
    state: Option<&ConfigState>,
    resource_type: ResourceType,
    incoming: Vec<Incoming>,
    warned: &mut HashSet<Ignored>,
) -> Verdict {
    if let Err((index, error)) = constraints::check_kept(kept, resource_type, incoming.iter().map(|i| &i.bytes[..])) {
        let label =
            incoming.get(index).map_or_else(|| format!("resources[{index}]"), |i| label(resource_type, index, i));
        return Verdict {
            rejected: vec![Rejected { name: label, error: error.to_string() }],
            refused: true,
            ..Verdict::default()
        };
    }
    // One validator of the typed configs for the whole response (see `common::unpack`).
    crate::pb::pgv::with_extension_checks_kept(kept, || convert_each(state, resource_type, incoming, warned))
}

/// The resources of a response that passed the constraints check, converted one by one.
fn convert_each(
    state: Option<&ConfigState>,
    resource_type: ResourceType,
    incoming: Vec<Incoming>,
    warned: &mut HashSet<Ignored>,
) -> Verdict {
    let now = SystemTime::now();
    let mut verdict = Verdict { accepted: Vec::with_capacity(incoming.len()), ..Verdict::default() };
    let mut failed = false;
    for (index, resource) in incoming.into_iter().enumerate() {
        let label = label(resource_type, index, &resource);
        let Incoming { name, version, bytes } = resource;
        let first = verdict.names.insert(label.clone());
        if failed {
            // After the first failure of an RDS/EDS/SDS response nothing more is looked at.
            continue;
        }
        let mut warnings = Warnings::new();
        let converted = if first {
            convert(state, resource_type, name.as_deref(), &bytes, &mut warnings)
        } else {
            // Envoy applies the first of two resources with one name and refuses the second.
            Err(format!("duplicate {} {label} found", noun(resource_type)))
        };
        match converted {
            Ok(resource) => {
                log_warnings(resource_type, resource.name(), warnings, warned);
                verdict.accepted.push(Versioned { resource, version, last_updated: now, raw: Raw::new(&bytes) });
            }
            Err(error) => {
                verdict.rejected.push(Rejected { name: label, error });
                failed = acceptance(resource_type) == Acceptance::UntilFirstFailure;
            }
        }
    }
    verdict
}

/// Envoy refuses a listener that would bind an address another listener binds ("has
/// duplicate address … as existing listener"); the others of the response are applied.
/// `kept` are the listeners that stay bound whatever this response does: static ones,
/// dynamic ones it does not replace or remove, and those whose new version it refused.
/// Listeners of the response are checked in order, each against `kept` and the ones
/// accepted before it. Listeners that do not bind, and port 0, take no address.
pub fn refuse_duplicate_addresses<'a>(verdict: &mut Verdict, kept: impl Iterator<Item = &'a Listener>) {
    fn bound(listener: &Listener) -> impl Iterator<Item = &Address> {
        let binds = listener.bind_to_port && !listener.internal;
        std::iter::once(&listener.address)
            .chain(&listener.additional_addresses)
            .filter(move |a| binds && !matches!(a, Address::Socket(s) if s.port() == 0))
    }
    let mut taken: HashMap<Address, String> = HashMap::new();
    for listener in kept {
        for address in bound(listener) {
            taken.entry(address.clone()).or_insert_with(|| listener.name.clone());
        }
    }
    let mut accepted = Vec::with_capacity(verdict.accepted.len());
    for versioned in std::mem::take(&mut verdict.accepted) {
        let Resource::Listener(listener) = &versioned.resource else {
            accepted.push(versioned);
            continue;
        };
        let duplicate = bound(listener).find(|a| taken.get(*a).is_some_and(|holder| *holder != listener.name));
        match duplicate {
            Some(address) => verdict.rejected.push(Rejected {
                name: listener.name.clone(),
                error: format!(
                    "address: error adding listener: '{}' has duplicate address '{address}' as existing listener",
                    listener.name
                ),
            }),
            None => {
                for address in bound(listener) {
                    taken.insert(address.clone(), listener.name.clone());
                }
                accepted.push(versioned);
            }
        }
    }
    verdict.accepted = accepted;
}

/// How the NACK names a resource: by its name (Delta's, else the resource's own), else by
/// its place in the response.
fn label(resource_type: ResourceType, index: usize, incoming: &Incoming) -> String {
    incoming
        .name
        .clone()
        .or_else(|| resource_name(resource_type, &incoming.bytes))
        .unwrap_or_else(|| format!("resources[{index}]"))
}

fn convert(
    state: Option<&ConfigState>,
    resource_type: ResourceType,
    name: Option<&str>,
    bytes: &[u8],
    warnings: &mut Warnings,
) -> Result<Resource, String> {
    let resource = decode_resource(resource_type, bytes, warnings).map_err(|e| e.to_string())?;
    if let Some(name) = name
        && name != resource.name()
    {
        return Err(format!("name: resource is named {:?}", resource.name()));
    }
    state.map_or(Ok(()), |s| s.check(&resource))?;
    Ok(resource)
}

/// Envoy's words for what a type holds.
fn noun(resource_type: ResourceType) -> &'static str {
    match resource_type {
        ResourceType::Listener => "listener",
        ResourceType::Cluster => "cluster",
        ResourceType::RouteConfiguration => "route configuration",
        ResourceType::ClusterLoadAssignment => "cluster load assignment",
        ResourceType::Secret => "secret",
    }
}

/// The `error_detail` message for `rejected`, close to Envoy's: LDS writes
/// `Error adding/updating listener(s) <name>: <error>\n` per listener, CDS
/// `Error adding/updating cluster(s) <name>: <error>, …`; RDS, EDS and SDS write the one
/// failure, which Outrider prefixes with the resource's name. Each error starts with the
/// field path of the problem.
pub fn error_detail(resource_type: ResourceType, rejected: &[Rejected]) -> Option<String> {
    if rejected.is_empty() {
        return None;
    }
    let each = rejected.iter().map(|r| format!("{}: {}", r.name, r.error));
    Some(match resource_type {
        ResourceType::Listener => {
            format!("Error adding/updating listener(s) {}", each.map(|e| e + "\n").collect::<String>())
        }
        ResourceType::Cluster => format!("Error adding/updating cluster(s) {}", each.collect::<Vec<_>>().join(", ")),
        _ => each.collect::<Vec<_>>().join("\n"),
    })
}

/// Logs each distinct cause once per stream, not once per resource per push: the same field
/// ignored in 5 000 virtual hosts (`virtual_hosts[0].x` … `virtual_hosts[4999].x`) or in
/// every cluster is one line, naming the first resource it was met in.
fn log_warnings(resource_type: ResourceType, name: &str, warnings: Warnings, warned: &mut HashSet<Ignored>) {
    for ignored in warnings.into_items() {
        if warned.insert(cause(resource_type, &ignored)) {
            tracing::warn!(
                resource = %resource_type.short_name(),
                %name,
                path = %ignored.path,
                "ignored: {} (logged once for every resource of this type)",
                ignored.what
            );
        }
    }
}

/// What makes two warnings the same: the resource type, the field path with its list
/// indices and map keys left out, and the reason.
fn cause(resource_type: ResourceType, ignored: &Ignored) -> Ignored {
    let mut path = String::with_capacity(ignored.path.len() + 8);
    path.push_str(resource_type.short_name());
    path.push(':');
    // Inside brackets: an index, or a quoted map key that may itself hold brackets.
    let (mut in_brackets, mut in_quotes) = (false, false);
    for c in ignored.path.chars() {
        match c {
            '"' if in_brackets => in_quotes = !in_quotes,
            ']' if in_brackets && !in_quotes => in_brackets = false,
            _ if in_brackets => {}
            '[' => {
                in_brackets = true;
                path.push_str("[]");
            }
            _ => path.push(c),
        }
    }
    Ignored { path, what: ignored.what.clone() }
}

#[cfg(test)]
mod tests;
