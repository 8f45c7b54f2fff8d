//! The connection manager's path normalization, applied before routing and before any
//! filter sees the path, in Envoy's order (`ConnectionManagerUtility::maybeNormalizePath`):
//! escaped slashes first (`path_with_escaped_slashes_action`), then RFC 3986 normalization
//! (`normalize_path`: dot segments removed, `\` read as `/`, escapes of unreserved
//! characters decoded, as Chromium's URL canonicalizer does for Envoy), then
//! `merge_slashes`. The query is never touched. Every path-based policy (RBAC's
//! `url_path`, routes) depends on this: without it `/public/../admin` would reach a
//! backend that resolves it to `/admin` while the policy saw `/public/...`.

use std::borrow::Cow;

use crate::config::listener::http_connection_manager::{EscapedSlashesAction, HttpConnectionManager};

/// What normalization decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Normalized {
    /// Go on with this path and query (`None`: unchanged).
    Continue(Option<String>),
    /// Answer 400: the path cannot be normalized, or carries escaped slashes and the
    /// action is `REJECT_REQUEST`.
    Reject,
    /// Answer 307 to this path (`UNESCAPE_AND_REDIRECT` changed it).
    Redirect(String),
}

/// Normalizes `path_and_query` as `manager` says.
pub fn normalize(manager: &HttpConnectionManager, path_and_query: &str) -> Normalized {
    let action = manager.path_with_escaped_slashes_action;
    if !manager.normalize_path && !manager.merge_slashes && action == EscapedSlashesAction::KeepUnchanged {
        return Normalized::Continue(None);
    }
    let (path, query) = match path_and_query.find('?') {
        Some(at) => path_and_query.split_at(at),
        None => (path_and_query, ""),
    };
    let mut path = Cow::Borrowed(path);
    let mut unescaped = false;
    if action != EscapedSlashesAction::KeepUnchanged && has_escaped_slash(&path) {
        if action == EscapedSlashesAction::RejectRequest {
            return Normalized::Reject;
        }
        path = Cow::Owned(unescape_slashes(&path));
        unescaped = true;
    }
    if manager.normalize_path {
        match canonical_path(&path) {
            Some(canonical) => path = Cow::Owned(canonical),
            None => return Normalized::Reject,
        }
    }
    if manager.merge_slashes {
        path = Cow::Owned(merge_slashes(&path));
    }
    if let Cow::Borrowed(_) = path {
        return Normalized::Continue(None);
    }
    let rebuilt = format!("{path}{query}");
    if unescaped && action == EscapedSlashesAction::UnescapeAndRedirect && rebuilt != path_and_query {
        return Normalized::Redirect(rebuilt);
    }
    if rebuilt == path_and_query { Normalized::Continue(None) } else { Normalized::Continue(Some(rebuilt)) }
}

/// `%2F`, `%2f`, `%5C` or `%5c`.
fn has_escaped_slash(path: &str) -> bool {
    path.as_bytes().windows(3).any(|w| w[0] == b'%' && matches!((w[1], w[2] | 0x20), (b'2', b'f') | (b'5', b'c')))
}

/// `%2F` → `/` and `%5C` → `\`, everything else as written. Worked on bytes and read back
/// as UTF-8: a byte is not a character, and pushing each byte of a multi-byte character
/// as a `char` of its own would turn `é` into `Ã©`.
fn unescape_slashes(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            match (bytes[i + 1], bytes[i + 2] | 0x20) {
                (b'2', b'f') => {
                    out.push(b'/');
                    i += 3;
                    continue;
                }
                (b'5', b'c') => {
                    out.push(b'\\');
                    i += 3;
                    continue;
                }
                _ => {}
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    // Only ASCII escapes were replaced, by ASCII bytes, so the rest of `path`'s UTF-8
    // is whole and this never loses anything.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// RFC 3986 unreserved characters: their escapes are decoded.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn hex(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// The canonical form of `path` (no query): `None` when it is not a path (it must start
/// with `/`). Segments are split on `/` and `\`; `.` and `..` (also escaped as `%2e`)
/// are resolved; escapes of unreserved characters are decoded, other escapes kept as
/// written; bytes a path may not hold raw are escaped.
fn canonical_path(path: &str) -> Option<String> {
    if !path.starts_with('/') && !path.starts_with('\\') {
        return None;
    }
    // Decode first, segment by segment, so that `%2e%2e` is recognised as `..`.
    let bytes = path.as_bytes();
    let mut segments: Vec<String> = Vec::new();
    let mut current = String::new();
    // Whether the path ends with a separator (or a dot segment, which leaves one).
    let mut trailing_slash = false;
    let mut i = 1;
    let finish = |segment: String, segments: &mut Vec<String>| -> bool {
        match segment.as_str() {
            "." => true,
            ".." => {
                segments.pop();
                true
            }
            _ => {
                segments.push(segment);
                false
            }
        }
    };
    while i <= bytes.len() {
        let byte = bytes.get(i).copied();
        match byte {
            None | Some(b'/') | Some(b'\\') => {
                let segment = std::mem::take(&mut current);
                let dot = finish(segment, &mut segments);
                trailing_slash = byte.is_some() || dot;
                if byte.is_none() && !dot {
                    trailing_slash = false;
                }
                i += 1;
            }
            Some(b'%') => {
                let decoded = bytes.get(i + 1).copied().and_then(hex).zip(bytes.get(i + 2).copied().and_then(hex));
                match decoded {
                    Some((high, low)) => {
                        let value = high * 16 + low;
                        if unreserved(value) {
                            current.push(char::from(value));
                        } else {
                            // Kept as written, hex case included (Chromium does not
                            // re-case escapes it keeps).
                            current.push('%');
                            current.push(char::from(bytes[i + 1]));
                            current.push(char::from(bytes[i + 2]));
                        }
                        i += 3;
                    }
                    None => {
                        // A lone `%` is kept as is, as Chromium keeps it.
                        current.push('%');
                        i += 1;
                    }
                }
            }
            Some(b) if b.is_ascii_graphic() && !matches!(b, b'"' | b'<' | b'>' | b'`' | b'{' | b'}' | b'#') => {
                current.push(char::from(b));
                i += 1;
            }
            Some(b) => {
                current.push_str(&format!("%{b:02X}"));
                i += 1;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Consecutive slashes become one.
fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut previous_slash = false;
    for c in path.chars() {
        if c == '/' && previous_slash {
            continue;
        }
        previous_slash = c == '/';
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_and_backslashes_resolve() {
        let cases = [
            ("/public/../admin", "/admin"),
            ("/./admin", "/admin"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/a/%2e%2e/b", "/b"),
            ("/a/%2E/b", "/a/b"),
            ("/a\\..\\b", "/b"),
            ("/%61dmin", "/admin"),
            ("/a%2fb", "/a%2fb"),
            ("/a/", "/a/"),
            ("/", "/"),
            ("//admin", "//admin"),
        ];
        for (input, want) in cases {
            assert_eq!(canonical_path(input).as_deref(), Some(want), "{input}");
        }
        assert_eq!(canonical_path("admin"), None);
    }

    #[test]
    fn slashes_merge_and_escaped_slashes_follow_the_action() {
        assert_eq!(merge_slashes("//a///b/"), "/a/b/");
        assert!(has_escaped_slash("/a%2Fb") && has_escaped_slash("/a%5cb") && !has_escaped_slash("/a%20b"));
        assert_eq!(unescape_slashes("/a%2Fb%5Cc%2"), "/a/b\\c%2");
    }

    /// Multi-byte UTF-8 survives the unescaping of slashes, raw or escaped. Envoy 1.40
    /// forwards `/a%2Fb/%C3%A9` under UNESCAPE_AND_FORWARD as `/a/b/%C3%A9` (its codec
    /// answers 400 to raw non-ASCII bytes in the request target).
    #[test]
    fn unescaping_slashes_keeps_multi_byte_characters() {
        assert_eq!(unescape_slashes("/a%2Fb/é"), "/a/b/é");
        assert_eq!(unescape_slashes("/日本%2f語/ü%5C"), "/日本/語/ü\\");
        assert_eq!(unescape_slashes("/a%2Fb/%C3%A9"), "/a/b/%C3%A9");
        let manager = HttpConnectionManager {
            path_with_escaped_slashes_action: EscapedSlashesAction::UnescapeAndForward,
            ..crate::proxy::headers::tests::hcm()
        };
        assert_eq!(normalize(&manager, "/a%2Fb/%C3%A9?q=%2F"), Normalized::Continue(Some("/a/b/%C3%A9?q=%2F".into())));
        assert_eq!(normalize(&manager, "/a%2Fb/é"), Normalized::Continue(Some("/a/b/é".into())));
    }
}
