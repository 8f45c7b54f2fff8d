//! Envoy's format command language (`SubstitutionFormatString`), parsed once when the
//! configuration is converted: a format is a list of literal and command pieces that the
//! proxy fills in per request (its access log formatter, `set_filter_state`).
//!
//! A command is `%NAME%`, `%NAME(argument)%` or either followed by `:max_length`; `%%`
//! is a literal `%`. A command Envoy does not know, or one Outrider does not implement, is
//! refused, as Envoy refuses an unknown one.

use std::fmt;

/// Envoy's default access log line (used when a logger sets no format).
pub const ENVOY_DEFAULT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" \
%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \
\"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n";

/// A parsed format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogFormat {
    /// A line of text; a missing value prints `-` (nothing with `omit_empty_values`).
    Text { pieces: Vec<Piece>, omit_empty: bool },
    /// One JSON object per line; a missing value is `null` (the key is left out with
    /// `omit_empty_values`).
    Json { fields: Vec<(String, JsonField)>, omit_empty: bool },
}

impl LogFormat {
    /// Envoy's default text format.
    pub fn envoy_default() -> Self {
        // The default format is a constant known to parse.
        Self::Text { pieces: parse(ENVOY_DEFAULT).unwrap_or_default(), omit_empty: false }
    }
}

/// A value of a JSON format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JsonField {
    /// A string template: a lone command keeps its type (numbers stay numbers).
    Template(Vec<Piece>),
    /// A nested object.
    Object(Vec<(String, JsonField)>),
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Piece {
    Literal(String),
    Command { command: Command, max_length: Option<usize> },
}

/// A header to look up, with its fallback (`%REQ(X?Y)%`); lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderLookup {
    pub name: String,
    pub alternative: Option<String>,
}

/// The commands Outrider knows, by Envoy's names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    StartTime(Option<TimeFormat>),
    Request(HeaderLookup),
    Response(HeaderLookup),
    Trailer(HeaderLookup),
    Protocol,
    ResponseCode,
    ResponseCodeDetails,
    ConnectionTerminationDetails,
    ResponseFlags,
    ResponseFlagsLong,
    BytesReceived,
    BytesSent,
    Duration,
    RequestDuration,
    ResponseDuration,
    UpstreamHost,
    UpstreamCluster,
    UpstreamClusterRaw,
    UpstreamLocalAddress,
    UpstreamTransportFailureReason,
    DownstreamLocalAddress,
    DownstreamRemoteAddress,
    DownstreamPeerUriSan,
    DownstreamLocalUriSan,
    RequestedServerName,
    RouteName,
    /// `%DYNAMIC_METADATA(namespace:key:…)%`: a namespace and a path into it.
    DynamicMetadata {
        namespace: String,
        path: Vec<String>,
    },
    /// `%FILTER_STATE(key:PLAIN|TYPED|FIELD:name)%`: a filter state object, as its text,
    /// or one field of an object that has fields (Istio's peer objects).
    FilterState {
        key: String,
        form: FilterStateForm,
    },
    /// `%HOSTNAME%` and `%ENVIRONMENT(X)%` are read once, as Envoy reads them when it
    /// parses the format.
    Constant(Option<String>),
}

/// How `%FILTER_STATE(…)%` renders its object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FilterStateForm {
    /// `TYPED`, the default: the object's serialised form (for the text objects Outrider
    /// keeps, a JSON string).
    Typed,
    /// `PLAIN`: the object's text.
    Plain,
    /// `FIELD:name`: one field of the object.
    Field(String),
}

/// A `%START_TIME(…)%` format: strftime's specifiers plus Envoy's `%f` / `%Nf`
/// (fractional seconds) and absl's `%E3S`-style seconds with fractions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TimeFormat(pub Vec<TimePiece>);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimePiece {
    Char(char),
    Year,
    Year2,
    Month,
    Day,
    DaySpace,
    DayOfYear,
    Hour,
    Hour12,
    Minute,
    Second,
    AmPm,
    WeekdayShort,
    WeekdayLong,
    MonthShort,
    MonthLong,
    /// Seconds since the epoch (`%s`).
    Epoch,
    /// `%z`: always `+0000` (times are UTC, as Envoy prints them).
    Offset,
    /// `%Z`: `UTC`.
    Zone,
    /// `digits` of fractional seconds (`%f` = 9, `%3f` = 3).
    Fraction(u8),
    /// Seconds with `digits` of fraction (`%E3S`; `%E*S` = as many as needed, up to 9).
    SecondsFraction(Option<u8>),
}

/// Why a format is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn error(message: impl Into<String>) -> FormatError {
    FormatError(message.into())
}

/// Parses a template into its pieces.
pub fn parse(template: &str) -> Result<Vec<Piece>, FormatError> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while let Some(at) = rest.find('%') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('%') {
            literal.push('%');
            rest = tail;
            continue;
        }
        let (piece, used) = command(after)
            .map_err(|e| error(format!("{e} (at position {} of the format)", template.len() - rest.len() + at)))?;
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(&mut literal)));
        }
        pieces.push(piece);
        rest = &after[used..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

/// One command after its opening `%`: the piece and the bytes it used (closing `%`
/// included). The shape is Envoy's: `NAME`, then `(argument)` (no `)` inside), then
/// `:digits`, then `%`.
fn command(text: &str) -> Result<(Piece, usize), FormatError> {
    let name_len =
        text.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(text.len());
    let name = &text[..name_len];
    let mut used = name_len;
    let mut argument = None;
    if text[used..].starts_with('(') {
        let close = text[used..].find(')').ok_or_else(|| error("a command's argument has no closing ')'"))?;
        argument = Some(&text[used + 1..used + close]);
        used += close + 1;
    }
    let mut max_length = None;
    if let Some(after) = text[used..].strip_prefix(':') {
        let digits = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
        if digits > 0 {
            let length = after[..digits].parse().map_err(|_| error("the max length is too large"))?;
            max_length = Some(length);
            used += 1 + digits;
        }
    }
    if name.is_empty() || !text[used..].starts_with('%') {
        return Err(error("no valid command"));
    }
    used += 1;
    let command = named(name, argument)?;
    Ok((Piece::Command { command, max_length }, used))
}

fn named(name: &str, argument: Option<&str>) -> Result<Command, FormatError> {
    let plain = |command: Command| match argument {
        None => Ok(command),
        Some(_) => Err(error(format!("{name} takes no argument"))),
    };
    let needs = || argument.ok_or_else(|| error(format!("{name} needs an argument")));
    match name {
        "START_TIME" => Ok(Command::StartTime(argument.filter(|a| !a.is_empty()).map(time_format).transpose()?)),
        "REQ" => Ok(Command::Request(header_lookup(needs()?)?)),
        "RESP" => Ok(Command::Response(header_lookup(needs()?)?)),
        "TRAILER" => Ok(Command::Trailer(header_lookup(needs()?)?)),
        "PROTOCOL" => plain(Command::Protocol),
        "RESPONSE_CODE" => plain(Command::ResponseCode),
        "RESPONSE_CODE_DETAILS" => plain(Command::ResponseCodeDetails),
        "CONNECTION_TERMINATION_DETAILS" => plain(Command::ConnectionTerminationDetails),
        "RESPONSE_FLAGS" => plain(Command::ResponseFlags),
        "RESPONSE_FLAGS_LONG" => plain(Command::ResponseFlagsLong),
        "BYTES_RECEIVED" => plain(Command::BytesReceived),
        "BYTES_SENT" => plain(Command::BytesSent),
        "DURATION" => plain(Command::Duration),
        "REQUEST_DURATION" => plain(Command::RequestDuration),
        "RESPONSE_DURATION" => plain(Command::ResponseDuration),
        "UPSTREAM_HOST" => plain(Command::UpstreamHost),
        "UPSTREAM_CLUSTER" => plain(Command::UpstreamCluster),
        "UPSTREAM_CLUSTER_RAW" => plain(Command::UpstreamClusterRaw),
        "UPSTREAM_LOCAL_ADDRESS" => plain(Command::UpstreamLocalAddress),
        "UPSTREAM_TRANSPORT_FAILURE_REASON" => plain(Command::UpstreamTransportFailureReason),
        "DOWNSTREAM_LOCAL_ADDRESS" => plain(Command::DownstreamLocalAddress),
        "DOWNSTREAM_REMOTE_ADDRESS" => plain(Command::DownstreamRemoteAddress),
        "DOWNSTREAM_PEER_URI_SAN" => plain(Command::DownstreamPeerUriSan),
        "DOWNSTREAM_LOCAL_URI_SAN" => plain(Command::DownstreamLocalUriSan),
        "REQUESTED_SERVER_NAME" => plain(Command::RequestedServerName),
        "ROUTE_NAME" => plain(Command::RouteName),
        "HOSTNAME" => plain(Command::Constant(hostname())),
        "ENVIRONMENT" => Ok(Command::Constant(std::env::var(needs()?).ok())),
        "DYNAMIC_METADATA" => {
            let mut parts = needs()?.split(':').map(str::to_owned);
            let namespace =
                parts.next().filter(|n| !n.is_empty()).ok_or_else(|| error("DYNAMIC_METADATA needs a namespace"))?;
            Ok(Command::DynamicMetadata { namespace, path: parts.collect() })
        }
        "FILTER_STATE" => {
            let mut parts = needs()?.splitn(3, ':');
            let key = parts.next().filter(|k| !k.is_empty()).ok_or_else(|| error("FILTER_STATE needs a key"))?;
            let form = match (parts.next(), parts.next()) {
                (None | Some("TYPED"), None) => FilterStateForm::Typed,
                (Some("PLAIN"), None) => FilterStateForm::Plain,
                (Some("FIELD"), Some(field)) if !field.is_empty() => FilterStateForm::Field(field.to_owned()),
                _ => return Err(error("FILTER_STATE takes key, key:PLAIN, key:TYPED or key:FIELD:name")),
            };
            Ok(Command::FilterState { key: key.to_owned(), form })
        }
        "CEL" | "METADATA" | "REQ_WITHOUT_QUERY" => {
            Err(error(format!("the {name} command needs a formatter extension, which Outrider does not implement")))
        }
        _ => Err(error(format!("{name} is not a command Outrider implements"))),
    }
}

fn header_lookup(argument: &str) -> Result<HeaderLookup, FormatError> {
    let mut names = argument.split('?');
    let name = names.next().unwrap_or_default().to_ascii_lowercase();
    let alternative = names.next().map(str::to_ascii_lowercase);
    if names.next().is_some() {
        return Err(error(format!("more than one alternative header in {argument}")));
    }
    if name.is_empty() || alternative.as_ref().is_some_and(String::is_empty) {
        return Err(error(format!("an empty header name in {argument}")));
    }
    Ok(HeaderLookup { name, alternative })
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty())
}

/// Parses a `%START_TIME(…)%` format.
pub fn time_format(text: &str) -> Result<TimeFormat, FormatError> {
    let mut pieces = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            pieces.push(TimePiece::Char(c));
            continue;
        }
        let Some(spec) = chars.next() else {
            return Err(error("a time format ends with '%'"));
        };
        let simple = match spec {
            'Y' => Some(TimePiece::Year),
            'y' => Some(TimePiece::Year2),
            'm' => Some(TimePiece::Month),
            'd' => Some(TimePiece::Day),
            'e' => Some(TimePiece::DaySpace),
            'j' => Some(TimePiece::DayOfYear),
            'H' => Some(TimePiece::Hour),
            'I' => Some(TimePiece::Hour12),
            'M' => Some(TimePiece::Minute),
            'S' => Some(TimePiece::Second),
            'p' => Some(TimePiece::AmPm),
            'a' => Some(TimePiece::WeekdayShort),
            'A' => Some(TimePiece::WeekdayLong),
            'b' | 'h' => Some(TimePiece::MonthShort),
            'B' => Some(TimePiece::MonthLong),
            's' => Some(TimePiece::Epoch),
            'z' => Some(TimePiece::Offset),
            'Z' => Some(TimePiece::Zone),
            'f' => Some(TimePiece::Fraction(9)),
            '%' => Some(TimePiece::Char('%')),
            'n' => Some(TimePiece::Char('\n')),
            't' => Some(TimePiece::Char('\t')),
            _ => None,
        };
        if let Some(piece) = simple {
            pieces.push(piece);
            continue;
        }
        match spec {
            'T' => pieces.extend([
                TimePiece::Hour,
                TimePiece::Char(':'),
                TimePiece::Minute,
                TimePiece::Char(':'),
                TimePiece::Second,
            ]),
            'F' => pieces.extend([
                TimePiece::Year,
                TimePiece::Char('-'),
                TimePiece::Month,
                TimePiece::Char('-'),
                TimePiece::Day,
            ]),
            'D' => pieces.extend([
                TimePiece::Month,
                TimePiece::Char('/'),
                TimePiece::Day,
                TimePiece::Char('/'),
                TimePiece::Year2,
            ]),
            'R' => pieces.extend([TimePiece::Hour, TimePiece::Char(':'), TimePiece::Minute]),
            '1'..='9' if chars.peek() == Some(&'f') => {
                chars.next();
                pieces.push(TimePiece::Fraction(spec as u8 - b'0'));
            }
            'E' => {
                let digits = match chars.next() {
                    Some('*') => None,
                    Some(d @ '0'..='9') => Some(d as u8 - b'0'),
                    _ => return Err(error(format!("%E in time format {text} needs a digit or '*'"))),
                };
                if chars.next() != Some('S') {
                    return Err(error(format!("%E in time format {text} is only supported as %E<n>S")));
                }
                pieces.push(TimePiece::SecondsFraction(digits));
            }
            other => return Err(error(format!("the time specifier %{other} is not supported"))),
        }
    }
    Ok(TimeFormat(pieces))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(command: Command) -> Piece {
        Piece::Command { command, max_length: None }
    }

    #[test]
    fn literals_commands_alternatives_and_lengths() {
        let pieces = parse("a %% %REQ(X-A?:Path):5% %RESPONSE_CODE%\n").unwrap_or_default();
        assert_eq!(
            pieces,
            vec![
                Piece::Literal("a % ".into()),
                Piece::Command {
                    command: Command::Request(HeaderLookup { name: "x-a".into(), alternative: Some(":path".into()) }),
                    max_length: Some(5)
                },
                Piece::Literal(" ".into()),
                cmd(Command::ResponseCode),
                Piece::Literal("\n".into()),
            ]
        );
    }

    #[test]
    fn start_time_formats() {
        let pieces = parse("%START_TIME(%Y-%m-%dT%H:%M:%S.%3fZ)%").unwrap_or_default();
        let Some(Piece::Command { command: Command::StartTime(Some(TimeFormat(time))), .. }) = pieces.first() else {
            panic!("{pieces:?}");
        };
        assert_eq!(time.len(), 14);
        assert_eq!(time[13], TimePiece::Char('Z'));
        assert_eq!(time[12], TimePiece::Fraction(3));
        assert!(parse("%START_TIME(%Q)%").is_err());
    }

    #[test]
    fn unknown_and_extension_commands_are_refused() {
        for bad in ["%NOT_A_COMMAND%", "%CEL(request.path)%", "%REQ(a?b?c)%", "%PROTOCOL(x)%", "%REQ%", "50% off"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn envoy_default_parses() {
        let LogFormat::Text { pieces, .. } = LogFormat::envoy_default() else { panic!() };
        assert_eq!(pieces.iter().filter(|p| matches!(p, Piece::Command { .. })).count(), 15);
    }
}
