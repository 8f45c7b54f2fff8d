//! What a route matches on: the path, headers, query parameters, and the string matchers
//! they are built from; filters, access log filters and the stats matcher match with the
//! same ones. Each matcher knows how to match, so the router and the tests share one
//! definition of Envoy's semantics.

use std::fmt;

/// A regular expression compiled at conversion, anchored so that it must match the whole
/// input, as Envoy's `safe_regex` (RE2 full match) does.
#[derive(Clone)]
pub struct Pattern {
    /// The expression as configured (before anchoring), for display and equality.
    source: String,
    regex: regex::Regex,
}

impl Pattern {
    /// Compiles `source` for full-string matching.
    pub fn new(source: &str) -> Result<Self, regex::Error> {
        let regex = regex::Regex::new(&format!("^(?:{source})$"))?;
        Ok(Self { source: source.to_owned(), regex })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn is_match(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.source)
    }
}

/// `envoy.type.matcher.v3.StringMatcher`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StringMatcher {
    /// `exact`, `prefix`, `suffix`, `contains`; with `ignore_case` the pattern is stored
    /// lower-cased and the value is lower-cased (ASCII) before comparing.
    Exact {
        value: String,
        ignore_case: bool,
    },
    Prefix {
        value: String,
        ignore_case: bool,
    },
    Suffix {
        value: String,
        ignore_case: bool,
    },
    Contains {
        value: String,
        ignore_case: bool,
    },
    /// `safe_regex`: full match; `ignore_case` has no effect on it, as in Envoy.
    Regex(Pattern),
}

impl StringMatcher {
    pub fn matches(&self, value: &str) -> bool {
        fn fold(value: &str, ignore_case: bool) -> std::borrow::Cow<'_, str> {
            if ignore_case { value.to_ascii_lowercase().into() } else { value.into() }
        }
        match self {
            StringMatcher::Exact { value: p, ignore_case } => fold(value, *ignore_case) == p.as_str(),
            StringMatcher::Prefix { value: p, ignore_case } => fold(value, *ignore_case).starts_with(p.as_str()),
            StringMatcher::Suffix { value: p, ignore_case } => fold(value, *ignore_case).ends_with(p.as_str()),
            StringMatcher::Contains { value: p, ignore_case } => fold(value, *ignore_case).contains(p.as_str()),
            StringMatcher::Regex(pattern) => pattern.is_match(value),
        }
    }
}

/// How a route matches the request path (`RouteMatch.path_specifier`). The query string is
/// never part of the path matched by `Path`, `SafeRegex` and `PathSeparatedPrefix`; `Prefix`
/// and `Path` compare against the path without the query, like Envoy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// The path starts with the prefix (`/` matches everything).
    Prefix(String),
    /// The path equals the value.
    Exact(String),
    /// The whole path matches the expression (case sensitivity does not apply).
    Regex(Pattern),
    /// The path equals the prefix or continues it with `/` (`/api` matches `/api` and
    /// `/api/x`, not `/apix`).
    SeparatedPrefix(String),
    /// `connect_matcher`: matches CONNECT requests, whatever their path.
    Connect,
}

impl PathMatch {
    /// Whether `path` (with or without its query string) matches. `case_sensitive` is the
    /// route's `case_sensitive`; with it off, the pattern was stored lower-cased.
    pub fn matches(&self, path: &str, case_sensitive: bool, is_connect: bool) -> bool {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let folded: std::borrow::Cow<'_, str> =
            if case_sensitive { path.into() } else { path.to_ascii_lowercase().into() };
        match self {
            PathMatch::Prefix(prefix) => folded.starts_with(prefix.as_str()),
            PathMatch::Exact(exact) => folded == exact.as_str(),
            PathMatch::Regex(pattern) => pattern.is_match(path),
            PathMatch::SeparatedPrefix(prefix) => {
                folded.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
            PathMatch::Connect => is_connect,
        }
    }
}

/// `envoy.config.route.v3.HeaderMatcher`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderMatcher {
    /// Lower-cased; may be a pseudo-header such as `:method` or `:authority`.
    pub name: String,
    pub rule: HeaderMatch,
    pub invert_match: bool,
    /// Match a missing header as if it were present with an empty value.
    pub treat_missing_header_as_empty: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatch {
    /// The (comma-joined) header value matches.
    Value(StringMatcher),
    /// The value parses as an integer in `[start, end)`.
    Range { start: i64, end: i64 },
    /// `present_match`: the header is present (`true`) or absent (`false`).
    Present(bool),
}

impl HeaderMatcher {
    /// Envoy's rule: a missing header fails every value matcher (so it matches exactly
    /// when `invert_match` is set), unless `treat_missing_header_as_empty`.
    pub fn matches(&self, value: Option<&str>) -> bool {
        if let HeaderMatch::Present(present) = self.rule {
            return (value.is_some() == present) != self.invert_match;
        }
        let value = match value {
            Some(v) => v,
            None if self.treat_missing_header_as_empty => "",
            None => return self.invert_match,
        };
        let matched = match &self.rule {
            HeaderMatch::Value(matcher) => matcher.matches(value),
            HeaderMatch::Range { start, end } => value.trim().parse::<i64>().is_ok_and(|v| *start <= v && v < *end),
            HeaderMatch::Present(_) => true,
        };
        matched != self.invert_match
    }
}

/// `envoy.config.route.v3.QueryParameterMatcher`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParameterMatcher {
    pub name: String,
    /// `None`: the parameter must be present (`present_match`), whatever its value.
    pub value: Option<StringMatcher>,
}

impl QueryParameterMatcher {
    /// `value` is the parameter's (first) value, `None` when it is absent.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (value, &self.value) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(v), Some(matcher)) => matcher.matches(v),
        }
    }
}

/// `envoy.config.route.v3.RouteMatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMatch {
    pub path: PathMatch,
    /// Default true. When false, prefix/exact/separated-prefix patterns are stored
    /// lower-cased and compared with the lower-cased path.
    pub case_sensitive: bool,
    /// All must match.
    pub headers: Vec<HeaderMatcher>,
    /// All must match.
    pub query_parameters: Vec<QueryParameterMatcher>,
    /// `grpc`: only requests with `content-type: application/grpc*` match.
    pub grpc: bool,
}
