//! `RouteMatch`, `HeaderMatcher`, `QueryParameterMatcher`, `StringMatcher` and
//! `RegexMatcher` → the matchers of [`crate::config::matcher`]. Regular expressions
//! are compiled here, so an invalid one is refused with its path.

use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::{
    HeaderMatch, HeaderMatcher, PathMatch, Pattern, QueryParameterMatcher, RegexRewrite, RouteMatch, StringMatcher,
};
use crate::pb::envoy::config::route::v3 as proto;
use crate::pb::envoy::r#type::matcher::v3 as matcher;

pub fn route_match(proto: proto::RouteMatch, warnings: &mut Warnings) -> Result<RouteMatch> {
    use proto::route_match::PathSpecifier as P;
    let proto::RouteMatch {
        case_sensitive,
        runtime_fraction,
        headers,
        query_parameters,
        cookies,
        grpc,
        tls_context,
        dynamic_metadata,
        filter_state,
        path_specifier,
    } = proto;
    let case_sensitive = super::common::bool_or(&case_sensitive, true);
    let fold = |s: String| if case_sensitive { s } else { s.to_ascii_lowercase() };
    if runtime_fraction.is_some() {
        return Err(ConfigError::new("runtime_fraction", "runtime-fraction matching is not supported"));
    }
    if !cookies.is_empty() {
        return Err(ConfigError::new("cookies", "cookie matching is not supported"));
    }
    if tls_context.is_some() {
        return Err(ConfigError::new("tls_context", "TLS context matching is not supported"));
    }
    if !dynamic_metadata.is_empty() {
        return Err(ConfigError::new("dynamic_metadata", "dynamic metadata matching is not supported"));
    }
    if !filter_state.is_empty() {
        return Err(ConfigError::new("filter_state", "filter state matching is not supported"));
    }
    let path = match path_specifier {
        Some(P::Prefix(prefix)) => PathMatch::Prefix(fold(prefix)),
        Some(P::Path(path)) => PathMatch::Exact(fold(path)),
        Some(P::SafeRegex(regex)) => PathMatch::Regex(regex_matcher(regex, warnings).map_err(|e| e.at("safe_regex"))?),
        Some(P::PathSeparatedPrefix(prefix)) => {
            let valid = prefix.starts_with('/') && !prefix.ends_with('/') && !prefix.contains(['?', '#']);
            if !valid {
                return Err(ConfigError::new(
                    "path_separated_prefix",
                    format!("{prefix:?} must start with '/', not end with '/' and contain no '?' or '#'"),
                ));
            }
            PathMatch::SeparatedPrefix(fold(prefix))
        }
        Some(P::ConnectMatcher(_)) => PathMatch::Connect,
        Some(P::PathMatchPolicy(_)) => {
            return Err(ConfigError::new("path_match_policy", "path match policy extensions are not supported"));
        }
        None => return Err(ConfigError::new("path_specifier", "one of prefix, path, safe_regex, ... is required")),
    };
    let headers = headers
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            warnings
                .within(format_args!("headers[{i}]"), |w| header_matcher(h, w))
                .map_err(|e| e.at(format_args!("headers[{i}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    let query_parameters = query_parameters
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            warnings
                .within(format_args!("query_parameters[{i}]"), |w| query_parameter_matcher(q, w))
                .map_err(|e| e.at(format_args!("query_parameters[{i}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RouteMatch { path, case_sensitive, headers, query_parameters, grpc: grpc.is_some() })
}

/// `envoy.config.route.v3.HeaderMatcher`, including the deprecated direct match fields.
#[allow(deprecated)]
pub fn header_matcher(proto: proto::HeaderMatcher, warnings: &mut Warnings) -> Result<HeaderMatcher> {
    use proto::header_matcher::HeaderMatchSpecifier as H;
    let proto::HeaderMatcher { name, invert_match, treat_missing_header_as_empty, header_match_specifier } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let plain = |value: String, field: &str, make: fn(String) -> StringMatcher| -> Result<StringMatcher> {
        if value.is_empty() {
            return Err(ConfigError::new(field, "must not be empty"));
        }
        Ok(make(value))
    };
    let rule = match header_match_specifier {
        Some(H::ExactMatch(value)) => HeaderMatch::Value(StringMatcher::Exact { value, ignore_case: false }),
        Some(H::PrefixMatch(v)) => {
            HeaderMatch::Value(plain(v, "prefix_match", |value| StringMatcher::Prefix { value, ignore_case: false })?)
        }
        Some(H::SuffixMatch(v)) => {
            HeaderMatch::Value(plain(v, "suffix_match", |value| StringMatcher::Suffix { value, ignore_case: false })?)
        }
        Some(H::ContainsMatch(v)) => HeaderMatch::Value(plain(v, "contains_match", |value| StringMatcher::Contains {
            value,
            ignore_case: false,
        })?),
        Some(H::SafeRegexMatch(regex)) => HeaderMatch::Value(StringMatcher::Regex(
            regex_matcher(regex, warnings).map_err(|e| e.at("safe_regex_match"))?,
        )),
        Some(H::RangeMatch(range)) => HeaderMatch::Range { start: range.start, end: range.end },
        Some(H::PresentMatch(present)) => HeaderMatch::Present(present),
        Some(H::StringMatch(m)) => HeaderMatch::Value(
            warnings.within("string_match", |w| string_matcher(m, w)).map_err(|e| e.at("string_match"))?,
        ),
        // Envoy: a matcher with no rule only requires the header to be present.
        None => HeaderMatch::Present(true),
    };
    Ok(HeaderMatcher { name: name.to_ascii_lowercase(), rule, invert_match, treat_missing_header_as_empty })
}

fn query_parameter_matcher(
    proto: proto::QueryParameterMatcher,
    warnings: &mut Warnings,
) -> Result<QueryParameterMatcher> {
    use proto::query_parameter_matcher::QueryParameterMatchSpecifier as Q;
    let proto::QueryParameterMatcher { name, query_parameter_match_specifier } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let value = match query_parameter_match_specifier {
        Some(Q::StringMatch(m)) => {
            Some(warnings.within("string_match", |w| string_matcher(m, w)).map_err(|e| e.at("string_match"))?)
        }
        // Envoy checks presence whatever the value of `present_match`.
        Some(Q::PresentMatch(_)) | None => None,
    };
    Ok(QueryParameterMatcher { name, value })
}

/// `envoy.type.matcher.v3.StringMatcher`.
pub fn string_matcher(proto: matcher::StringMatcher, warnings: &mut Warnings) -> Result<StringMatcher> {
    use matcher::string_matcher::MatchPattern as M;
    let matcher::StringMatcher { ignore_case, match_pattern } = proto;
    let fold = |s: String| if ignore_case { s.to_ascii_lowercase() } else { s };
    let non_empty = |s: String, field: &str| {
        if s.is_empty() { Err(ConfigError::new(field, "must not be empty")) } else { Ok(fold(s)) }
    };
    Ok(match match_pattern {
        Some(M::Exact(value)) => StringMatcher::Exact { value: fold(value), ignore_case },
        Some(M::Prefix(value)) => StringMatcher::Prefix { value: non_empty(value, "prefix")?, ignore_case },
        Some(M::Suffix(value)) => StringMatcher::Suffix { value: non_empty(value, "suffix")?, ignore_case },
        Some(M::Contains(value)) => StringMatcher::Contains { value: non_empty(value, "contains")?, ignore_case },
        Some(M::SafeRegex(regex)) => {
            StringMatcher::Regex(regex_matcher(regex, warnings).map_err(|e| e.at("safe_regex"))?)
        }
        Some(M::Custom(_)) => return Err(ConfigError::new("custom", "custom string matchers are not supported")),
        None => return Err(ConfigError::new("match_pattern", "one of exact, prefix, suffix, ... is required")),
    })
}

/// `envoy.type.matcher.v3.RegexMatcher`, compiled for full-string matching. The `regex`
/// crate accepts RE2's syntax (it is the same family: no look-around, no back-references).
pub fn regex_matcher(proto: matcher::RegexMatcher, warnings: &mut Warnings) -> Result<Pattern> {
    let regex = regex_source(proto, warnings);
    Pattern::new(&regex).map_err(|e| ConfigError::new("regex", format!("invalid regular expression {regex:?}: {e}")))
}

/// A `RegexMatcher`'s expression, the engine options warned about.
#[allow(deprecated)]
fn regex_source(proto: matcher::RegexMatcher, warnings: &mut Warnings) -> String {
    let matcher::RegexMatcher { regex, engine_type } = proto;
    if engine_type.is_some() {
        warnings.ignored("google_re2", "RE2 program size limits do not apply to Outrider's regex engine");
    }
    regex
}

/// `envoy.type.matcher.v3.RegexMatchAndSubstitute` (`regex_rewrite`): the pattern matches
/// anywhere (not anchored, unlike `safe_regex`), the substitution in RE2's `\1` syntax.
pub fn regex_match_and_substitute(
    proto: matcher::RegexMatchAndSubstitute,
    warnings: &mut Warnings,
) -> Result<RegexRewrite> {
    use crate::config::route::regex_rewrite::RegexRewriteError as E;
    let matcher::RegexMatchAndSubstitute { pattern, substitution } = proto;
    let Some(pattern) = pattern else {
        return Err(ConfigError::new("pattern", "is required"));
    };
    let regex = warnings.within("pattern", |w| regex_source(pattern, w));
    RegexRewrite::new(&regex, &substitution).map_err(|e| match e {
        E::Pattern { .. } => ConfigError::new("pattern.regex", e.to_string()),
        E::Escape { .. } | E::Group { .. } => ConfigError::new("substitution", e.to_string()),
    })
}
