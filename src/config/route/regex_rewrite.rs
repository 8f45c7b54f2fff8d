//! `envoy.type.matcher.v3.RegexMatchAndSubstitute`: every match of a pattern in a value
//! is replaced by a substitution, as Envoy's `replaceAll` (RE2's `GlobalReplace`) does.
//!
//! The substitution uses RE2's rewrite syntax: `\0` … `\9` stand for the whole match and
//! the capture groups, `\\` for a backslash; every other character (a `$` too) is
//! literal. It is parsed once here into literal and group pieces, so nothing is ever
//! translated into the `regex` crate's own `$1` syntax and no `$` can be misread.

use std::fmt;

use regex::{Captures, Regex};

/// A compiled pattern (unanchored: it matches anywhere in the value) and its parsed
/// substitution.
#[derive(Clone)]
pub struct RegexRewrite {
    /// The pattern as configured, for display and equality.
    source: String,
    /// The substitution as configured.
    substitution: String,
    regex: Regex,
    pieces: Vec<Piece>,
}

/// One part of a parsed substitution.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    /// `\N`: capture group N (0 is the whole match); empty when the group did not take
    /// part in the match, as in RE2.
    Group(usize),
}

/// Why a pattern or substitution is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegexRewriteError {
    #[error("invalid regular expression {pattern:?}: {reason}")]
    Pattern { pattern: String, reason: String },
    /// RE2 reports the escape as invalid and leaves a partial rewrite: refused instead.
    #[error("invalid escape {escape:?} in substitution {substitution:?}: only \\0 to \\9 and \\\\ are allowed")]
    Escape { escape: String, substitution: String },
    /// RE2 rewrites nothing when the substitution names a group the pattern lacks:
    /// refused, since such a rewrite can never do what it says.
    #[error("substitution {substitution:?} refers to group {group}, but the pattern has {groups} capture groups")]
    Group { substitution: String, group: usize, groups: usize },
}

impl RegexRewrite {
    pub fn new(pattern: &str, substitution: &str) -> Result<Self, RegexRewriteError> {
        let regex = Regex::new(pattern)
            .map_err(|e| RegexRewriteError::Pattern { pattern: pattern.to_owned(), reason: e.to_string() })?;
        let pieces = parse_substitution(substitution)?;
        // `captures_len` counts group 0 too.
        let groups = regex.captures_len().saturating_sub(1);
        if let Some(group) = pieces.iter().find_map(|p| match p {
            Piece::Group(n) if *n > groups => Some(*n),
            _ => None,
        }) {
            return Err(RegexRewriteError::Group { substitution: substitution.to_owned(), group, groups });
        }
        Ok(Self { source: pattern.to_owned(), substitution: substitution.to_owned(), regex, pieces })
    }

    pub fn pattern(&self) -> &str {
        &self.source
    }

    pub fn substitution(&self) -> &str {
        &self.substitution
    }

    /// Replaces every non-overlapping match in `value`, left to right. An empty match
    /// right where the previous match ended is skipped, as RE2 skips it.
    pub fn replace_all(&self, value: &str) -> String {
        self.regex
            .replace_all(value, |captures: &Captures<'_>| {
                let mut out = String::new();
                for piece in &self.pieces {
                    match piece {
                        Piece::Literal(text) => out.push_str(text),
                        Piece::Group(n) => out.push_str(captures.get(*n).map_or("", |m| m.as_str())),
                    }
                }
                out
            })
            .into_owned()
    }
}

/// RE2's rewrite syntax: `\` followed by a digit is a group, `\\` a backslash, and any
/// other escape (or a trailing `\`) is an error.
fn parse_substitution(substitution: &str) -> Result<Vec<Piece>, RegexRewriteError> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = substitution.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            literal.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => literal.push('\\'),
            Some(d) if d.is_ascii_digit() => {
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Group(d.to_digit(10).map_or(0, |n| n as usize)));
            }
            other => {
                return Err(RegexRewriteError::Escape {
                    escape: other.map_or_else(|| "\\".to_owned(), |c| format!("\\{c}")),
                    substitution: substitution.to_owned(),
                });
            }
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

impl PartialEq for RegexRewrite {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.substitution == other.substitution
    }
}

impl Eq for RegexRewrite {}

impl fmt::Debug for RegexRewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegexRewrite({:?} -> {:?})", self.source, self.substitution)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(pattern: &str, substitution: &str, value: &str) -> String {
        RegexRewrite::new(pattern, substitution).unwrap().replace_all(value)
    }

    #[test]
    fn groups_escapes_and_literal_dollars() {
        // Envoy's documented examples.
        assert_eq!(
            rewrite("^/service/([^/]+)(/.*)$", "\\2/instance/\\1", "/service/foo/v1/api"),
            "/v1/api/instance/foo"
        );
        assert_eq!(rewrite("one", "two", "/xxx/one/yyy/one/zzz"), "/xxx/two/yyy/two/zzz");
        assert_eq!(rewrite("(?i)/xxx/", "/yyy/", "/aaa/XxX/bbb"), "/aaa/yyy/bbb");
        // `\0` is the whole match; `$1` and `${x}` are literal, unlike the regex crate's syntax.
        assert_eq!(rewrite("b+", "[\\0]", "abbbc"), "a[bbb]c");
        assert_eq!(rewrite("(b)", "$1${1}\\\\", "abc"), "a$1${1}\\c");
        // A group that took no part in the match is empty.
        assert_eq!(rewrite("a(x)?b", "<\\1>", "ab"), "<>");
        // No match: unchanged.
        assert_eq!(rewrite("zzz", "y", "/abc"), "/abc");
    }

    #[test]
    fn empty_matches_follow_re2() {
        // RE2's GlobalReplace("baaab", "a*", "X") gives "XbXbX": the empty match right
        // after "aaa" is skipped.
        assert_eq!(rewrite("a*", "X", "baaab"), "XbXbX");
        // Empty matches never split a character.
        assert_eq!(rewrite("x*", "-", "é"), "-é-");
    }

    #[test]
    fn refusals() {
        assert!(matches!(RegexRewrite::new("(", "x"), Err(RegexRewriteError::Pattern { .. })));
        assert!(matches!(RegexRewrite::new("a", "\\x"), Err(RegexRewriteError::Escape { .. })));
        assert!(matches!(RegexRewrite::new("a", "trailing\\"), Err(RegexRewriteError::Escape { .. })));
        assert_eq!(
            RegexRewrite::new("(a)", "\\2"),
            Err(RegexRewriteError::Group { substitution: "\\2".into(), group: 2, groups: 1 })
        );
        assert!(RegexRewrite::new("(a)", "\\1\\0").is_ok());
    }
}
