//! Access log lines in Envoy's default format:
//!
//! ```text
//! [%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//! %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//! %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//! "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
//! ```
//!
//! (one line; a missing value prints `-`). The request's part is captured when it
//! arrives, the response's when its headers are sent, and the line is written when the
//! response ends ([`super::completion`]).

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{HeaderMap, Version};

use super::response_flags::ResponseFlags;
use crate::telemetry::LineWriter;

/// One request's log line, waiting for the end of its response.
#[derive(Debug)]
pub struct PendingLog {
    writers: Vec<LineWriter>,
    start: SystemTime,
    method: String,
    path: String,
    protocol: &'static str,
    x_forwarded_for: Option<String>,
    user_agent: Option<String>,
    request_id: Option<String>,
    authority: Option<String>,
    pub bytes_received: u64,
    pub response_code: u16,
    pub flags: ResponseFlags,
    pub upstream_service_time: Option<String>,
    pub upstream_host: Option<String>,
}

impl PendingLog {
    /// Captures the request's fields (after the connection manager's own header handling,
    /// so a generated `x-request-id` is logged).
    pub fn new(writers: Vec<LineWriter>, start: SystemTime, parts: &Parts) -> Self {
        let header = |name: &str| header(&parts.headers, name);
        let path = header("x-envoy-original-path")
            .unwrap_or_else(|| parts.uri.path_and_query().map_or_else(|| "/".to_owned(), |p| p.to_string()));
        Self {
            writers,
            start,
            method: parts.method.to_string(),
            path,
            protocol: protocol(parts.version),
            x_forwarded_for: header("x-forwarded-for"),
            user_agent: header("user-agent"),
            request_id: header("x-request-id"),
            authority: parts.uri.authority().map(|a| a.to_string()).or_else(|| header("host")),
            bytes_received: 0,
            response_code: 0,
            flags: ResponseFlags::NONE,
            upstream_service_time: None,
            upstream_host: None,
        }
    }

    /// Records the response head.
    pub fn respond(&mut self, status: u16, headers: &HeaderMap, flags: ResponseFlags) {
        self.response_code = status;
        self.flags.insert(flags);
        self.upstream_service_time = header(headers, "x-envoy-upstream-service-time");
    }

    /// Formats the line and hands it to every writer.
    pub fn write(&self, bytes_sent: u64, duration: Duration) {
        let line = self.format(bytes_sent, duration);
        for writer in &self.writers {
            writer.write(line.clone());
        }
    }

    fn format(&self, bytes_sent: u64, duration: Duration) -> String {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut line = String::with_capacity(256);
        let _ = writeln!(
            line,
            "[{}] \"{} {} {}\" {} {} {} {} {} {} \"{}\" \"{}\" \"{}\" \"{}\" \"{}\"",
            humantime::format_rfc3339_millis(self.start),
            self.method,
            self.path,
            self.protocol,
            self.response_code,
            self.flags,
            self.bytes_received,
            bytes_sent,
            duration.as_millis(),
            dash(&self.upstream_service_time),
            dash(&self.x_forwarded_for),
            dash(&self.user_agent),
            dash(&self.request_id),
            dash(&self.authority),
            dash(&self.upstream_host),
        );
        line
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_format() {
        let request = http::Request::get("/a?b=1")
            .header("host", "svc")
            .header("user-agent", "curl/8")
            .header("x-request-id", "r-1")
            .body(())
            .unwrap_or_default();
        let (parts, ()) = request.into_parts();
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let mut log = PendingLog::new(Vec::new(), start, &parts);
        let mut headers = HeaderMap::new();
        headers.insert("x-envoy-upstream-service-time", http::HeaderValue::from_static("7"));
        log.respond(503, &headers, ResponseFlags::UPSTREAM_CONNECTION_FAILURE);
        log.flags.insert(ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED);
        log.upstream_host = Some("127.0.0.1:8080".into());
        assert_eq!(
            log.format(91, Duration::from_millis(12)),
            "[2023-11-14T22:13:20.123Z] \"GET /a?b=1 HTTP/1.1\" 503 UF,URX 0 91 12 7 \"-\" \"curl/8\" \"r-1\" \"svc\" \"127.0.0.1:8080\"\n"
        );
    }
}
