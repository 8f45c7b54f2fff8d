//! Requirements as they run: Envoy's verifier tree. A provider requirement (or an
//! `allow_missing` / `allow_missing_or_failed` one) runs an authenticator over the tokens
//! its locations hold; `requires_any` / `requires_all` combine their children.
//!
//! Envoy starts children in order and completes a group as soon as its answer is known;
//! a child that must fetch keys completes later, after the children that did not. Outrider
//! runs children one after the other and keeps, for each result, whether it waited for a
//! fetch, so that a group reports the status Envoy's event loop would report.

use futures::FutureExt as _;
use futures::future::LocalBoxFuture;

use super::authenticate::{Authenticator, Session};
use super::extract::Extractor;
use super::keys::{Audiences, Providers};
use super::status::{Outcome, Status};
use crate::config::filters::jwt_authn::JwtRequirement;

pub enum Verifier {
    Authenticate(Authenticator),
    Any(Vec<Verifier>),
    All(Vec<Verifier>),
    AllowAll,
}

impl Verifier {
    pub fn build(requirement: &JwtRequirement, providers: &Providers) -> Self {
        Self::build_inner(requirement, providers, &[])
    }

    /// `siblings`: for `allow_missing` / `allow_missing_or_failed` in a `requires_any`,
    /// the providers of the other requirements (their locations are the ones checked).
    fn build_inner(requirement: &JwtRequirement, providers: &Providers, siblings: &[&str]) -> Self {
        match requirement {
            JwtRequirement::Provider { name, audiences } => {
                // Conversion checked that the provider exists; a missing one verifies nothing.
                let Some(keys) = providers.get(name) else {
                    return Self::Authenticate(Authenticator::unknown_provider());
                };
                Self::Authenticate(Authenticator {
                    extractor: Extractor::new([&*keys.provider]),
                    provider: Some(keys.clone()),
                    audiences: audiences.as_deref().map(Audiences::new),
                    allow_failed: false,
                    allow_missing: false,
                })
            }
            JwtRequirement::AllowMissing | JwtRequirement::AllowMissingOrFailed => {
                let chosen = siblings.iter().filter_map(|name| providers.get(*name)).map(|k| &*k.provider);
                Self::Authenticate(Authenticator {
                    extractor: Extractor::new(chosen),
                    provider: None,
                    audiences: None,
                    allow_failed: matches!(requirement, JwtRequirement::AllowMissingOrFailed),
                    allow_missing: true,
                })
            }
            JwtRequirement::Any(children) => {
                // As Envoy: the regular children in order, then one bypass requirement
                // (allow_missing_or_failed preferred) last, checking their providers.
                let mut names = Vec::new();
                let mut bypass: Option<&JwtRequirement> = None;
                let mut verifiers = Vec::new();
                for child in children {
                    match child {
                        JwtRequirement::AllowMissing | JwtRequirement::AllowMissingOrFailed => {
                            if bypass.is_none_or(|b| matches!(b, JwtRequirement::AllowMissing)) {
                                bypass = Some(child);
                            }
                            continue;
                        }
                        JwtRequirement::Provider { name, .. } => names.push(name.as_str()),
                        _ => {}
                    }
                    verifiers.push(Self::build_inner(child, providers, &[]));
                }
                if let Some(bypass) = bypass {
                    verifiers.push(Self::build_inner(bypass, providers, &names));
                }
                Self::Any(verifiers)
            }
            JwtRequirement::All(children) => {
                Self::All(children.iter().map(|c| Self::build_inner(c, providers, &[])).collect())
            }
            JwtRequirement::AllowAll => Self::AllowAll,
        }
    }

    pub fn verify<'s>(&'s self, session: &'s mut Session<'_, '_>) -> LocalBoxFuture<'s, Outcome> {
        async move {
            match self {
                Self::AllowAll => Outcome { status: Status::Ok, waited: false },
                Self::Authenticate(authenticator) => authenticator.run(session).await,
                Self::Any(children) => any(children, session).await,
                Self::All(children) => all(children, session).await,
            }
        }
        .boxed_local()
    }
}

/// The first success wins. When all fail, Envoy reports the child that completed last:
/// the last one that waited for a fetch, else the last one.
async fn any(children: &[Verifier], session: &mut Session<'_, '_>) -> Outcome {
    let mut last = Outcome { status: Status::JwtMissed, waited: false };
    let mut last_waited: Option<Outcome> = None;
    for child in children {
        let outcome = child.verify(session).await;
        if outcome.status == Status::Ok {
            return outcome;
        }
        if outcome.waited {
            last_waited = Some(outcome);
        }
        last = outcome;
    }
    let waited = last_waited.is_some();
    Outcome { status: last_waited.unwrap_or(last).status, waited }
}

/// The first failure wins; Envoy sees a failure that did not wait before any that did.
async fn all(children: &[Verifier], session: &mut Session<'_, '_>) -> Outcome {
    let mut first_waited_failure: Option<Outcome> = None;
    let mut waited = false;
    for child in children {
        let outcome = child.verify(session).await;
        waited |= outcome.waited;
        if outcome.status != Status::Ok {
            if !outcome.waited {
                return outcome;
            }
            first_waited_failure.get_or_insert(outcome);
        }
    }
    first_waited_failure.unwrap_or(Outcome { status: Status::Ok, waited })
}
