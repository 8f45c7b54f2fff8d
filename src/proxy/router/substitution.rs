//! The `%COMMAND%` substitutions of header values (`request_headers_to_add` etc.). The
//! commonly used commands are evaluated; any other is kept verbatim, and `%%` is a `%`.

use std::net::SocketAddr;

use http::HeaderMap;

/// What substitutions may read about the downstream connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DownstreamInfo {
    pub remote: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
    /// `HTTP/1.1`, `HTTP/2`, … for `%PROTOCOL%`.
    pub protocol: &'static str,
}

/// Expands `value`; `request` answers `%REQ(name)%`.
pub fn substitute(value: &str, downstream: &DownstreamInfo, request: Option<&HeaderMap>) -> String {
    if !value.contains('%') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find('%') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        if let Some(stripped) = after.strip_prefix('%') {
            out.push('%');
            rest = stripped;
            continue;
        }
        let Some(end) = after.find('%') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let command = &after[..end];
        match evaluate(command, downstream, request) {
            Some(expanded) => out.push_str(&expanded),
            None => {
                out.push('%');
                out.push_str(command);
                out.push('%');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// One command's value; `None` for commands Outrider does not evaluate. A known command
/// whose value is unavailable yields an empty string, as Envoy's formatter does.
fn evaluate(command: &str, downstream: &DownstreamInfo, request: Option<&HeaderMap>) -> Option<String> {
    let addr = |a: Option<SocketAddr>, port: bool| {
        a.map(|a| if port { a.to_string() } else { a.ip().to_string() }).unwrap_or_default()
    };
    Some(match command {
        "DOWNSTREAM_REMOTE_ADDRESS" => addr(downstream.remote, true),
        "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT" => addr(downstream.remote, false),
        "DOWNSTREAM_LOCAL_ADDRESS" => addr(downstream.local, true),
        "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT" => addr(downstream.local, false),
        "PROTOCOL" => downstream.protocol.to_owned(),
        _ => {
            let name = command.strip_prefix("REQ(")?.strip_suffix(')')?;
            // `REQ(a?b)`: header `a`, else header `b`.
            let mut names = name.splitn(2, '?');
            let value = names
                .find_map(|n| request.and_then(|h| h.get(n.trim().to_ascii_lowercase())))
                .and_then(|v| v.to_str().ok());
            value.unwrap_or_default().to_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_escapes_and_unknowns() {
        let info = DownstreamInfo {
            remote: Some("10.0.0.1:5555".parse().unwrap()),
            local: Some("10.0.0.2:80".parse().unwrap()),
            protocol: "HTTP/1.1",
        };
        let mut request = HeaderMap::new();
        request.insert("x-user", "alice".parse().unwrap());
        let s = |v: &str| substitute(v, &info, Some(&request));
        assert_eq!(s("plain"), "plain");
        assert_eq!(s("%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"), "10.0.0.1");
        assert_eq!(s("ip=%DOWNSTREAM_REMOTE_ADDRESS% via %PROTOCOL%"), "ip=10.0.0.1:5555 via HTTP/1.1");
        assert_eq!(s("%DOWNSTREAM_LOCAL_ADDRESS%"), "10.0.0.2:80");
        assert_eq!(s("u=%REQ(X-User)%"), "u=alice");
        assert_eq!(s("%REQ(x-missing?x-user)%"), "alice");
        assert_eq!(s("%REQ(x-missing)%"), "");
        assert_eq!(s("100%%"), "100%");
        assert_eq!(s("%UNKNOWN_THING%"), "%UNKNOWN_THING%");
        assert_eq!(s("50% off"), "50% off");
    }
}
