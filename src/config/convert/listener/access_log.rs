//! `access_log` of the HTTP connection manager → [`AccessLog`]: the stdout, stderr and
//! file loggers, in Envoy's default format. Filters and custom formats are reported as
//! ignored (the entry still logs every request in the default format); other loggers
//! are refused.

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::http_connection_manager::{AccessLog, AccessLogSink};
use crate::pb::envoy::config::accesslog::v3 as proto;
use crate::pb::envoy::extensions::access_loggers::file::v3::FileAccessLog;
use crate::pb::envoy::extensions::access_loggers::stream::v3::{StderrAccessLog, StdoutAccessLog};

const STDOUT: &str = "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
const STDERR: &str = "envoy.extensions.access_loggers.stream.v3.StderrAccessLog";
const FILE: &str = "envoy.extensions.access_loggers.file.v3.FileAccessLog";

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
    if filter.is_some() {
        warnings.ignored("filter", "access log filters are not applied: every request is logged");
    }
    let Some(proto::access_log::ConfigType::TypedConfig(any)) = config_type else {
        return Err(ConfigError::new("typed_config", "an access logger needs a typed_config"));
    };
    let default_format = "the custom format is not applied: Envoy's default format is used";
    let sink = match common::type_name(&any.type_url) {
        STDOUT => {
            let StdoutAccessLog { access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            if access_log_format.is_some() {
                warnings.ignored("typed_config.log_format", default_format);
            }
            AccessLogSink::Stdout
        }
        STDERR => {
            let StderrAccessLog { access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            if access_log_format.is_some() {
                warnings.ignored("typed_config.log_format", default_format);
            }
            AccessLogSink::Stderr
        }
        FILE => {
            let FileAccessLog { path, access_log_format } = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
            if path.is_empty() {
                return Err(ConfigError::new("typed_config.path", "a file access log needs a path"));
            }
            if access_log_format.is_some() {
                warnings.ignored("typed_config.access_log_format", default_format);
            }
            AccessLogSink::File(path.into())
        }
        other => {
            return Err(ConfigError::new("typed_config", format!("access logger {other} is not supported")));
        }
    };
    Ok(AccessLog { sink })
}

#[cfg(test)]
mod tests {
    use super::*;
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
                AccessLog { sink: AccessLogSink::Stdout },
                AccessLog { sink: AccessLogSink::File("/var/log/access.log".into()) },
            ])
        );
        let grpc = Any {
            type_url: "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig".into(),
            value: Vec::new(),
        };
        let refused = access_logs(vec![log(grpc)], &mut warnings);
        assert!(refused.is_err_and(|e| e.to_string().contains("access_log[0].typed_config")));
    }
}
