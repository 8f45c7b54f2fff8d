//! Where tokens are found: Envoy's `Extractor`. Each location (a header with a value
//! prefix, a query parameter, a cookie) remembers which providers' issuers may use it; the
//! defaults, when a provider names no location, are `Authorization: Bearer <token>` and
//! the `access_token` query parameter.

use std::collections::{BTreeMap, BTreeSet};

use http::HeaderName;
use http::request::Parts;

use crate::config::filters::jwt_authn::JwtProvider;

/// The issuers that configured a location; an empty issuer allows any.
#[derive(Debug, Default, Clone)]
pub struct IssuerChecker {
    allow_all: bool,
    issuers: BTreeSet<String>,
}

impl IssuerChecker {
    fn add(&mut self, issuer: &str) {
        if issuer.is_empty() {
            self.allow_all = true;
        } else {
            self.issuers.insert(issuer.to_owned());
        }
    }

    pub fn allows(&self, issuer: &str) -> bool {
        self.allow_all || self.issuers.contains(issuer)
    }
}

#[derive(Debug)]
struct HeaderLocation {
    name: HeaderName,
    value_prefix: String,
    issuers: IssuerChecker,
}

/// Where a token came from, to remove it when the provider does not `forward` it.
#[derive(Debug, Clone, Copy)]
pub enum Location<'e> {
    Header(&'e HeaderName),
    Param(&'e str),
    /// Envoy leaves cookies in place.
    Cookie,
}

/// One token found in a request.
#[derive(Debug, Clone)]
pub struct Token<'e> {
    pub value: String,
    pub location: Location<'e>,
    pub issuers: &'e IssuerChecker,
}

#[derive(Debug, Default)]
pub struct Extractor {
    /// By header name + value prefix (Envoy's `std::map` key, so the same order).
    headers: BTreeMap<String, HeaderLocation>,
    params: BTreeMap<String, IssuerChecker>,
    cookies: BTreeMap<String, IssuerChecker>,
    /// Headers the filter itself sets (payload, claims): removed from every request first,
    /// so a client cannot forge them.
    sanitize: Vec<HeaderName>,
}

const BEARER_PREFIX: &str = "Bearer ";
const ACCESS_TOKEN_PARAM: &str = "access_token";

/// Characters of base64url plus the dot.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

impl Extractor {
    pub fn new<'p>(providers: impl IntoIterator<Item = &'p JwtProvider>) -> Self {
        let mut extractor = Self::default();
        for provider in providers {
            extractor.add(provider);
        }
        extractor
    }

    fn add(&mut self, provider: &JwtProvider) {
        for header in &provider.from_headers {
            self.add_header(&provider.issuer, header.name.clone(), &header.value_prefix);
        }
        for param in &provider.from_params {
            self.params.entry(param.clone()).or_default().add(&provider.issuer);
        }
        for cookie in &provider.from_cookies {
            self.cookies.entry(cookie.clone()).or_default().add(&provider.issuer);
        }
        if provider.from_headers.is_empty() && provider.from_params.is_empty() && provider.from_cookies.is_empty() {
            self.add_header(&provider.issuer, http::header::AUTHORIZATION, BEARER_PREFIX);
            self.params.entry(ACCESS_TOKEN_PARAM.to_owned()).or_default().add(&provider.issuer);
        }
        self.sanitize.extend(provider.forward_payload_header.iter().cloned());
        self.sanitize.extend(provider.claim_to_headers.iter().map(|c| c.header_name.clone()));
    }

    fn add_header(&mut self, issuer: &str, name: HeaderName, value_prefix: &str) {
        let key = format!("{}{value_prefix}", name.as_str());
        let location = self.headers.entry(key).or_insert_with(|| HeaderLocation {
            name,
            value_prefix: value_prefix.to_owned(),
            issuers: IssuerChecker::default(),
        });
        location.issuers.add(issuer);
    }

    /// Removes the headers the filter sets from the request.
    pub fn sanitize(&self, parts: &mut Parts) {
        for name in &self.sanitize {
            parts.headers.remove(name);
        }
    }

    /// Every token in the request, in Envoy's order: headers, then parameters, then
    /// cookies (each by location key).
    pub fn extract(&self, parts: &Parts) -> Vec<Token<'_>> {
        let mut tokens = Vec::new();
        for location in self.headers.values() {
            for value in parts.headers.get_all(&location.name) {
                let Ok(value) = value.to_str() else { continue };
                let token = if location.value_prefix.is_empty() {
                    value
                } else {
                    // The prefix may be anywhere in the value; the token starts at the
                    // first base64url character after it (the whole value if none).
                    let Some(at) = value.find(&location.value_prefix) else { continue };
                    let rest = &value[at + location.value_prefix.len()..];
                    rest.find(is_token_char).map_or(value, |start| &rest[start..])
                };
                tokens.push(Token {
                    value: token.to_owned(),
                    location: Location::Header(&location.name),
                    issuers: &location.issuers,
                });
            }
        }
        if !self.params.is_empty() {
            let query = query_params(parts.uri.query().unwrap_or_default());
            for (name, issuers) in &self.params {
                if let Some((_, value)) = query.iter().find(|(key, _)| key == name) {
                    tokens.push(Token { value: value.clone(), location: Location::Param(name), issuers });
                }
            }
        }
        if !self.cookies.is_empty() {
            let cookies = cookies(parts, &self.cookies);
            for (name, issuers) in &self.cookies {
                if let Some(value) = cookies.get(name.as_str()) {
                    tokens.push(Token { value: value.clone(), location: Location::Cookie, issuers });
                }
            }
        }
        tokens
    }
}

impl Token<'_> {
    /// Takes the token out of the request (`forward: false`).
    pub fn remove(&self, parts: &mut Parts) {
        match self.location {
            Location::Header(name) => {
                parts.headers.remove(name);
            }
            Location::Param(name) => remove_param(parts, name),
            Location::Cookie => {}
        }
    }
}

/// `k=v&k2` → decoded `(k, v)`, `(k2, "")`, in order.
pub fn query_params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn remove_param(parts: &mut Parts, name: &str) {
    let Some(query) = parts.uri.query() else { return };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && percent_decode(pair.split_once('=').map_or(*pair, |(k, _)| k)) != name)
        .collect();
    let path = parts.uri.path();
    let path_and_query = if kept.is_empty() { path.to_owned() } else { format!("{path}?{}", kept.join("&")) };
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    if let Ok(pq) = path_and_query.parse() {
        uri.path_and_query = Some(pq);
    }
    parts.uri = http::Uri::from_parts(uri).unwrap_or_default();
}

/// The wanted cookies of the request's `cookie` headers (the first of each name wins;
/// surrounding double quotes are dropped), as Envoy's `parseCookies`.
fn cookies<'n>(parts: &Parts, wanted: &'n BTreeMap<String, IssuerChecker>) -> BTreeMap<&'n str, String> {
    let mut found = BTreeMap::new();
    for header in parts.headers.get_all(http::header::COOKIE) {
        let Ok(header) = header.to_str() else { continue };
        for pair in header.split(';') {
            let pair = pair.trim_start_matches(' ');
            let Some((key, value)) = pair.split_once('=') else { continue };
            let Some((name, _)) = wanted.get_key_value(key) else { continue };
            let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
            found.entry(name.as_str()).or_insert_with(|| value.to_owned());
        }
    }
    found
}

/// Decodes `%XX` escapes; malformed ones are kept as they are.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
