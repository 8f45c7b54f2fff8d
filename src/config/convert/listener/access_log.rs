//! `access_log` of the HTTP connection manager → [`AccessLog`]: the stdout, stderr and
//! file loggers with their formats (`log_format` / `access_log_format`, parsed here
//! once), Envoy's gRPC access log service and the OpenTelemetry logger. Other loggers are
//! refused with their path.

use super::super::common;
use super::super::log_format::{json_format, log_format, text_format};
use crate::config::access_log::LogFormat;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::http_connection_manager::{AccessLog, AccessLogSink};
use crate::pb::envoy::config::accesslog::v3 as proto;
use crate::pb::envoy::extensions::access_loggers::file::v3::FileAccessLog;
use crate::pb::envoy::extensions::access_loggers::file::v3::file_access_log;
use crate::pb::envoy::extensions::access_loggers::stream::v3::{StderrAccessLog, StdoutAccessLog};
use crate::pb::envoy::extensions::access_loggers::stream::v3::{stderr_access_log, stdout_access_log};

const STDOUT: &str = "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
const STDERR: &str = "envoy.extensions.access_loggers.stream.v3.StderrAccessLog";
const FILE: &str = "envoy.extensions.access_loggers.file.v3.FileAccessLog";
const HTTP_GRPC: &str = "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig";
const OPEN_TELEMETRY: &str = "envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig";

pub fn access_logs(logs: Vec<proto::AccessLog>, warnings: &mut Warnings) -> Result<Vec<AccessLog>> {
    logs.into_iter()
        .enumerate()
        .map(|(i, log)| {
            let path = format!("access_log[{i}]");
            warnings.within(&path, |w| access_log(log, w)).map_err(|e| e.at(&path))
        })
        .collect()
}

fn access_log(log: proto::AccessLog, warnings: &mut Warnings) -> Result<AccessLog> {
    let proto::AccessLog { name: _, filter, config_type } = log;
    let filter = filter
        .map(|f| {
            warnings.within("filter", |w| super::access_log_filter::access_log_filter(f, w)).map_err(|e| e.at("filter"))
        })
        .transpose()?
        .map(std::sync::Arc::new);
    let Some(proto::access_log::ConfigType::TypedConfig(any)) = config_type else {
        return Err(ConfigError::new("typed_config", "an access logger needs a typed_config"));
    };
    let (sink, format) = match common::type_name(&any.type_url) {
        STDOUT => {
            let StdoutAccessLog { access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            let format = access_log_format.map(|stdout_access_log::AccessLogFormat::LogFormat(f)| f);
            (AccessLogSink::Stdout, log_format(format).map_err(|e| e.at("typed_config.log_format"))?)
        }
        STDERR => {
            let StderrAccessLog { access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            let format = access_log_format.map(|stderr_access_log::AccessLogFormat::LogFormat(f)| f);
            (AccessLogSink::Stderr, log_format(format).map_err(|e| e.at("typed_config.log_format"))?)
        }
        FILE => {
            let FileAccessLog { path, access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            if path.is_empty() {
                return Err(ConfigError::new("typed_config.path", "a file access log needs a path"));
            }
            // As Envoy: the process's own standard streams, never opened by path (a sidecar
            // that runs as another user than the one owning its output may not reopen it;
            // Istio's `accessLogFile: /dev/stdout` says this path).
            let sink = match path.as_str() {
                "/dev/stdout" => AccessLogSink::Stdout,
                "/dev/stderr" => AccessLogSink::Stderr,
                _ => AccessLogSink::File(path.into()),
            };
            (sink, file_format(access_log_format).map_err(|e| e.at("typed_config"))?)
        }
        HTTP_GRPC => {
            let config = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            let grpc = super::access_log_grpc::http_grpc(config, warnings).map_err(|e| e.at("typed_config"))?;
            (AccessLogSink::Grpc(grpc), LogFormat::envoy_default())
        }
        OPEN_TELEMETRY => {
            let config = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            let otel = warnings
                .within("typed_config", |w| super::access_log_otel::open_telemetry(config, w))
                .map_err(|e| e.at("typed_config"))?;
            // The format is the logger's body and attributes; this one is unused.
            (AccessLogSink::OpenTelemetry(std::sync::Arc::new(otel)), LogFormat::envoy_default())
        }
        other => {
            return Err(ConfigError::new("typed_config", format!("access logger {other} is not supported")));
        }
    };
    Ok(AccessLog { sink, format: format.into(), filter })
}

/// The file logger's format: `log_format`, or one of its deprecated spellings.
#[allow(deprecated)]
fn file_format(format: Option<file_access_log::AccessLogFormat>) -> Result<LogFormat> {
    use file_access_log::AccessLogFormat as F;
    match format {
        None => Ok(LogFormat::envoy_default()),
        Some(F::LogFormat(format)) => log_format(Some(format)).map_err(|e| e.at("log_format")),
        Some(F::Format(text)) => text_format(&text, false).map_err(|e| e.at("format")),
        Some(F::JsonFormat(json)) => json_format(&json, false).map_err(|e| e.at("json_format")),
        Some(F::TypedJsonFormat(json)) => json_format(&json, false).map_err(|e| e.at("typed_json_format")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3::{SubstitutionFormatString, data_source, substitution_format_string};
    use crate::pb::google::protobuf::Any;
    use prost::{Message, Name};

    fn log(any: Any) -> proto::AccessLog {
        proto::AccessLog {
            name: "log".into(),
            filter: None,
            config_type: Some(proto::access_log::ConfigType::TypedConfig(any)),
        }
    }

    #[test]
    fn stdout_and_file_loggers_convert_others_are_refused() {
        let stdout = Any { type_url: StdoutAccessLog::type_url(), value: StdoutAccessLog::default().encode_to_vec() };
        let file = FileAccessLog { path: "/var/log/access.log".into(), access_log_format: None };
        let file = Any { type_url: FileAccessLog::type_url(), value: file.encode_to_vec() };
        let mut warnings = Warnings::new();
        let logs = access_logs(vec![log(stdout), log(file)], &mut warnings).ok();
        assert_eq!(
            logs,
            Some(vec![
                AccessLog { sink: AccessLogSink::Stdout, format: LogFormat::envoy_default().into(), filter: None },
                AccessLog {
                    sink: AccessLogSink::File("/var/log/access.log".into()),
                    format: LogFormat::envoy_default().into(),
                    filter: None,
                },
            ])
        );
        let grpc = Any {
            type_url: "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig".into(),
            value: Vec::new(),
        };
        let refused = access_logs(vec![log(grpc)], &mut warnings);
        assert!(refused.is_err_and(|e| e.to_string().contains("access_log[0].typed_config.common_config")));
    }

    #[test]
    fn file_paths_of_the_standard_streams_write_to_the_processs_own() {
        let mut warnings = Warnings::new();
        for (path, sink) in [("/dev/stdout", AccessLogSink::Stdout), ("/dev/stderr", AccessLogSink::Stderr)] {
            let file = FileAccessLog { path: path.into(), access_log_format: None };
            let file = Any { type_url: FileAccessLog::type_url(), value: file.encode_to_vec() };
            let logs = access_logs(vec![log(file)], &mut warnings).unwrap();
            assert_eq!(logs[0].sink, sink, "{path}");
        }
    }

    fn file_with(format: SubstitutionFormatString) -> Any {
        let file = FileAccessLog {
            path: "/tmp/a.log".into(),
            access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(format)),
        };
        Any { type_url: FileAccessLog::type_url(), value: file.encode_to_vec() }
    }

    fn text(template: &str) -> SubstitutionFormatString {
        SubstitutionFormatString {
            format: Some(substitution_format_string::Format::TextFormatSource(
                crate::pb::envoy::config::core::v3::DataSource {
                    specifier: Some(data_source::Specifier::InlineString(template.into())),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }
    }

    fn error_path(result: Result<Vec<AccessLog>>) -> String {
        result.err().map(|e| e.path().to_owned()).unwrap_or_default()
    }

    #[test]
    fn unknown_commands_formatters_and_extension_filters_are_refused_with_their_path() {
        let mut warnings = Warnings::new();
        let cel = access_logs(vec![log(file_with(text("%CEL(request.path)%")))], &mut warnings);
        assert_eq!(error_path(cel), "access_log[0].typed_config.log_format.text_format_source.inline_string");
        let mut with_formatters = text("%PROTOCOL%");
        with_formatters.formatters.push(Default::default());
        let formatters = access_logs(vec![log(file_with(with_formatters))], &mut warnings);
        assert_eq!(error_path(formatters), "access_log[0].typed_config.log_format.formatters[0].name");
        let mut filtered = log(file_with(text("%PROTOCOL%\n")));
        filtered.filter = Some(proto::AccessLogFilter {
            filter_specifier: Some(proto::access_log_filter::FilterSpecifier::OrFilter(proto::OrFilter {
                filters: vec![proto::AccessLogFilter {
                    filter_specifier: Some(proto::access_log_filter::FilterSpecifier::ExtensionFilter(
                        proto::ExtensionFilter { name: "cel".into(), config_type: None },
                    )),
                }],
            })),
        });
        let refused = access_logs(vec![filtered], &mut warnings);
        assert_eq!(error_path(refused), "access_log[0].filter.or_filter.filters[0].extension_filter");
    }
}
