//! `common_http_protocol_options.headers_with_underscores_action`: what a request header
//! whose name has an underscore gets, before anything else sees the request (Envoy's codecs
//! check it while parsing). Such names are how a client smuggles a header past a backend
//! that folds `_` into `-` (CGI, some frameworks): `x_user` is read as `x-user`, which the
//! proxy may have meant to set or remove.

use http::HeaderMap;

use crate::config::listener::http_connection_manager::HeadersWithUnderscoresAction;

/// What happens to a request under the action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Underscores {
    /// No such header, or `ALLOW`: the request goes on as it is.
    Pass,
    /// `DROP_HEADER`: this many headers were removed; the request goes on.
    Dropped(usize),
    /// `REJECT_REQUEST`: Envoy answers HTTP/1 with 400 and closes the connection, and
    /// resets an HTTP/2 stream.
    Reject,
}

/// Applies `action` to the request's `headers` (pseudo-headers are not in them).
pub(super) fn apply(action: HeadersWithUnderscoresAction, headers: &mut HeaderMap) -> Underscores {
    if action == HeadersWithUnderscoresAction::Allow {
        return Underscores::Pass;
    }
    let found: Vec<_> = headers.keys().filter(|name| name.as_str().contains('_')).cloned().collect();
    if found.is_empty() {
        return Underscores::Pass;
    }
    match action {
        HeadersWithUnderscoresAction::Allow => Underscores::Pass,
        HeadersWithUnderscoresAction::RejectRequest => Underscores::Reject,
        HeadersWithUnderscoresAction::DropHeader => {
            // Every value of each name goes (`remove` takes them all).
            let dropped = found.iter().map(|name| headers.get_all(name).iter().count()).sum();
            for name in &found {
                headers.remove(name);
            }
            Underscores::Dropped(dropped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(names: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for name in names {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), "v".parse().unwrap());
        }
        map
    }

    #[test]
    fn allow_keeps_everything() {
        let mut map = headers(&["x_user", "host"]);
        assert_eq!(apply(HeadersWithUnderscoresAction::Allow, &mut map), Underscores::Pass);
        assert!(map.contains_key("x_user"));
    }

    #[test]
    fn drop_removes_every_value_of_each_name_only() {
        let mut map = headers(&["x_user", "x_user", "a_b", "x-user", "host"]);
        assert_eq!(apply(HeadersWithUnderscoresAction::DropHeader, &mut map), Underscores::Dropped(3));
        let mut left: Vec<_> = map.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["host", "x-user"]);
    }

    #[test]
    fn reject_only_when_a_name_has_one() {
        let mut clean = headers(&["x-user", "host"]);
        assert_eq!(apply(HeadersWithUnderscoresAction::RejectRequest, &mut clean), Underscores::Pass);
        let mut dirty = headers(&["x_user"]);
        assert_eq!(apply(HeadersWithUnderscoresAction::RejectRequest, &mut dirty), Underscores::Reject);
    }
}
