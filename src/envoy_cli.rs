//! Envoy's command line, so that whatever starts Envoy (istio-agent, scripts, the Envoy
//! Docker image's entry point) can start Outrider unchanged: `outrider -c bootstrap.yaml
//! --concurrency 2 ...`, or Outrider installed as `envoy`.
//!
//! Flags that change behaviour are honoured; flags that only concern Envoy's own machinery
//! (hot restart, its allocator, its file flushing) are accepted and listed in
//! [`EnvoyOptions::without_effect`]; anything else is refused, as Envoy refuses an unknown
//! flag. Values are checked as Envoy checks them.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Envoy's default `--drain-time-s`.
const DEFAULT_DRAIN_TIME_S: u64 = 600;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    Run(Box<EnvoyOptions>),
    /// `--version`.
    Version,
    /// `-h`, `--help`.
    Help,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Serve,
    /// Load and check the configuration, then exit (0 when valid).
    Validate,
}

/// `--drain-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStrategy {
    /// Every connection is asked to close as soon as the drain starts (istio-agent's choice).
    Immediate,
    /// Envoy asks a growing share of connections to close over the drain time. Outrider asks
    /// them all at once, as `immediate`: the drain still lasts up to `--drain-time-s`.
    Gradual,
}

/// Envoy's server options that Outrider reads.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvoyOptions {
    /// `-c`, `--config-path`.
    pub config_path: Option<PathBuf>,
    /// `--config-yaml`: merged over the `-c` file, as Envoy merges it.
    pub config_yaml: Option<String>,
    pub mode: Mode,
    /// `--concurrency`.
    pub concurrency: Option<usize>,
    /// `--drain-time-s`.
    pub drain_time: Duration,
    pub drain_strategy: DrainStrategy,
    /// `-l`, `--log-level`, as `tracing` names it.
    pub log_level: Option<String>,
    /// `--component-log-level`: Envoy logger name → `tracing` level.
    pub component_log_levels: Vec<(String, String)>,
    /// `--log-format`, kept to pick text or JSON (see [`EnvoyOptions::log_json`]).
    pub log_format: Option<String>,
    /// `--log-path`: logs go to this file instead of standard error.
    pub log_path: Option<PathBuf>,
    /// `--admin-address-path`: the admin address is written here once it listens.
    pub admin_address_path: Option<PathBuf>,
    /// `--service-cluster`, `--service-node`, `--service-zone`: override the bootstrap's node.
    pub service_cluster: Option<String>,
    pub service_node: Option<String>,
    pub service_zone: Option<String>,
    /// Flags accepted that change nothing in Outrider, as given (logged at start-up).
    pub without_effect: Vec<String>,
}

impl Default for EnvoyOptions {
    fn default() -> Self {
        Self {
            config_path: None,
            config_yaml: None,
            mode: Mode::Serve,
            concurrency: None,
            drain_time: Duration::from_secs(DEFAULT_DRAIN_TIME_S),
            drain_strategy: DrainStrategy::Immediate,
            log_level: None,
            component_log_levels: Vec::new(),
            log_format: None,
            log_path: None,
            admin_address_path: None,
            service_cluster: None,
            service_node: None,
            service_zone: None,
            without_effect: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    #[error("unknown flag {0} (Outrider takes Envoy's command line; see --help)")]
    Unknown(String),
    #[error("unexpected argument {0:?} (Outrider takes Envoy's command line; see --help)")]
    Positional(String),
    #[error("flag {0} needs a value")]
    MissingValue(String),
    #[error("flag {flag}: invalid value {value:?}: {reason}")]
    Invalid { flag: String, value: String, reason: String },
    #[error("at least one of --config-path (-c) and --config-yaml is required")]
    NoConfig,
}

/// Whether this command line is Envoy's rather than one of Outrider's subcommands: the
/// program is called `envoy`, or its first argument is a flag (`outrider -c ...`).
pub fn is_envoy_command_line(argv0: &str, first: Option<&str>) -> bool {
    let name = Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name == "envoy" || first.is_some_and(|a| a.starts_with('-'))
}

/// Flags that take a value and do nothing in Outrider.
const VALUED_WITHOUT_EFFECT: &[&str] = &[
    // Hot restart: Outrider is restarted by starting a new process.
    "--base-id",
    "--base-id-path",
    "--parent-shutdown-time-s",
    "--socket-path",
    "--socket-mode",
    // Access log files are written as Outrider writes them.
    "--file-flush-interval-msec",
    "--file-flush-min-size-kb",
    // Stats are Outrider's own.
    "--stats-tag",
];

/// Switches that do nothing in Outrider.
const SWITCHES_WITHOUT_EFFECT: &[&str] = &[
    "--disable-hot-restart",
    "--use-dynamic-base-id",
    "--skip-hot-restart-on-no-parent",
    "--skip-hot-restart-parent-stats",
    // Unknown bootstrap fields are always reported (`outrider validate`, start-up log),
    // and refused where ignoring them would change behaviour.
    "--allow-unknown-static-fields",
    "--reject-unknown-dynamic-fields",
    "--ignore-unknown-dynamic-fields",
    "--skip-deprecated-logs",
    "--log-format-escaped",
    "--enable-fine-grain-logging",
    "--enable-core-dump",
    "--enable-mutex-tracing",
    // The default concurrency already counts the CPUs this process may run on.
    "--cpuset-threads",
];

/// Envoy's logger names (`ALL_LOGGER_IDS`), accepted by `--component-log-level`.
const ENVOY_LOGGERS: &[&str] = &[
    "admin",
    "alternate_protocols_cache",
    "assert",
    "aws",
    "backtrace",
    "basic_auth",
    "cache_filter",
    "client",
    "compression",
    "config",
    "conn_handler",
    "connection",
    "credential_injector",
    "decompression",
    "dns",
    "dubbo",
    "envoy_bug",
    "ext_authz",
    "ext_proc",
    "file",
    "filter",
    "forward_proxy",
    "geolocation",
    "golang",
    "grpc",
    "happy_eyeballs",
    "hc",
    "health_checker",
    "http",
    "http2",
    "http3",
    "hystrix",
    "init",
    "io",
    "jwt",
    "kafka",
    "key_value_store",
    "lua",
    "main",
    "matcher",
    "misc",
    "mongo",
    "multi_connection",
    "oauth2",
    "pool",
    "quic",
    "quic_stream",
    "rate_limit_quota",
    "rbac",
    "rds",
    "redis",
    "rocketmq",
    "router",
    "runtime",
    "secret",
    "stateful_session",
    "stats",
    "tap",
    "testing",
    "thrift",
    "tracing",
    "udp",
    "upstream",
    "wasm",
    "websocket",
];

/// The Outrider modules (`tracing` targets) that do the work an Envoy logger names. Loggers
/// without a counterpart (Envoy's `misc`, protocols Outrider does not speak) select nothing.
fn targets(logger: &str) -> &'static [&'static str] {
    match logger {
        "admin" => &["outrider::admin"],
        "main" | "init" => &["outrider::app", "outrider::store"],
        "config" | "rds" => &["outrider::config", "outrider::xds", "outrider::store"],
        "grpc" => &["outrider::xds", "outrider::proxy::filters::callout"],
        "connection" | "conn_handler" | "io" => {
            &["outrider::proxy::connection", "outrider::proxy::listener", "outrider::proxy::transport"]
        }
        "http" | "http2" => &["outrider::proxy::hcm"],
        "router" => &["outrider::proxy::router", "outrider::proxy::retry"],
        "upstream" => &["outrider::proxy::upstream", "outrider::lb", "outrider::orca"],
        "pool" | "client" => &["outrider::proxy::upstream"],
        "hc" | "health_checker" => &["outrider::health"],
        "secret" => &["outrider::tls"],
        "filter" => &["outrider::proxy::filters", "outrider::proxy::tcp_proxy"],
        "rbac" => &["outrider::proxy::filters::rbac"],
        "jwt" => &["outrider::proxy::filters::jwt_authn"],
        "ext_authz" => &["outrider::proxy::filters::ext_authz"],
        "compression" | "decompression" => &["outrider::proxy::filters::compressor"],
        "tracing" => &["outrider::telemetry::tracing", "outrider::proxy::request_trace"],
        "stats" => &["outrider::telemetry"],
        _ => &[],
    }
}

/// Envoy's level names → `tracing`'s.
pub fn level(flag: &str, value: &str) -> Result<String, CliError> {
    let level = match value {
        "trace" | "debug" | "info" | "error" | "off" => value,
        "warning" | "warn" => "warn",
        // `tracing` has nothing above error.
        "critical" => "error",
        _ => {
            return Err(CliError::Invalid {
                flag: flag.to_owned(),
                value: value.to_owned(),
                reason: "not one of trace, debug, info, warning, error, critical, off".to_owned(),
            });
        }
    };
    Ok(level.to_owned())
}

impl EnvoyOptions {
    /// The `tracing` filter of `-l` and `--component-log-level`; `None` leaves the default
    /// (`RUST_LOG`, else info).
    pub fn log_filter(&self) -> Option<String> {
        if self.log_level.is_none() && self.component_log_levels.is_empty() {
            return None;
        }
        let mut directives = vec![self.log_level.clone().unwrap_or_else(|| "info".to_owned())];
        for (logger, level) in &self.component_log_levels {
            directives.extend(targets(logger).iter().map(|target| format!("{target}={level}")));
        }
        Some(directives.join(","))
    }

    /// Envoy's `--log-format` is a spdlog pattern; Outrider keeps its own line layout and
    /// takes from the pattern only whether lines are JSON (`%j`, or a pattern that is a
    /// JSON object).
    pub fn log_json(&self) -> bool {
        self.log_format.as_deref().is_some_and(|f| f.contains("%j") || f.trim_start().starts_with('{'))
    }
}

/// Parses Envoy's command line (without the program name).
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Invocation, CliError> {
    let mut options = EnvoyOptions::default();
    let mut rest = args.iter().map(AsRef::as_ref);
    while let Some(arg) = rest.next() {
        // `--flag=value` as well as `--flag value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
            _ => (arg, None),
        };
        if !flag.starts_with('-') {
            return Err(CliError::Positional(arg.to_owned()));
        }
        let mut value = || inline.or_else(|| rest.next()).ok_or_else(|| CliError::MissingValue(flag.to_owned()));
        match flag {
            "-h" | "--help" => return Ok(Invocation::Help),
            "--version" => return Ok(Invocation::Version),
            "-c" | "--config-path" => options.config_path = Some(PathBuf::from(value()?)),
            "--config-yaml" => options.config_yaml = Some(value()?.to_owned()),
            "--mode" => {
                options.mode = match value()? {
                    "serve" => Mode::Serve,
                    "validate" => Mode::Validate,
                    other => return Err(invalid(flag, other, "Outrider supports serve and validate")),
                }
            }
            "--concurrency" => {
                let value = value()?;
                let n: usize = value.parse().map_err(|_| invalid(flag, value, "not a whole number"))?;
                // Envoy runs one worker when asked for none.
                options.concurrency = Some(n.max(1));
            }
            "--drain-time-s" => {
                let value = value()?;
                let seconds: u64 = value.parse().map_err(|_| invalid(flag, value, "not a whole number of seconds"))?;
                options.drain_time = Duration::from_secs(seconds);
            }
            "--drain-strategy" => {
                options.drain_strategy = match value()? {
                    "immediate" => DrainStrategy::Immediate,
                    "gradual" => DrainStrategy::Gradual,
                    other => return Err(invalid(flag, other, "not one of immediate, gradual")),
                }
            }
            "-l" | "--log-level" => options.log_level = Some(level(flag, value()?)?),
            "--component-log-level" => {
                for pair in value()?.split(',').filter(|p| !p.is_empty()) {
                    let Some((logger, level_name)) = pair.split_once(':') else {
                        return Err(invalid(flag, pair, "expected <logger>:<level>"));
                    };
                    if !ENVOY_LOGGERS.contains(&logger) {
                        return Err(invalid(flag, logger, "not one of Envoy's loggers"));
                    }
                    options.component_log_levels.push((logger.to_owned(), level(flag, level_name)?));
                }
            }
            "--log-format" => options.log_format = Some(value()?.to_owned()),
            "--log-path" => options.log_path = Some(PathBuf::from(value()?)),
            "--admin-address-path" => options.admin_address_path = Some(PathBuf::from(value()?)),
            "--service-cluster" => options.service_cluster = Some(value()?.to_owned()),
            "--service-node" => options.service_node = Some(value()?.to_owned()),
            "--service-zone" => options.service_zone = Some(value()?.to_owned()),
            "--local-address-ip-version" => {
                // Envoy uses it for the local address it reports when a listener has none;
                // Outrider's listeners always have theirs.
                let value = value()?;
                if value != "v4" && value != "v6" {
                    return Err(invalid(flag, value, "not one of v4, v6"));
                }
                options.without_effect.push(format!("{flag} {value}"));
            }
            "--restart-epoch" => {
                // Epoch 0 is a fresh start; a later epoch expects a parent to hand over its
                // sockets, which Outrider cannot take.
                let value = value()?;
                if value != "0" {
                    return Err(invalid(flag, value, "hot restart is not supported; only epoch 0"));
                }
                options.without_effect.push(format!("{flag} {value}"));
            }
            "--disable-extensions" => {
                let value = value()?;
                return Err(invalid(flag, value, "disabling extensions is not supported"));
            }
            _ if VALUED_WITHOUT_EFFECT.contains(&flag) => {
                let value = value()?;
                options.without_effect.push(format!("{flag} {value}"));
            }
            _ if SWITCHES_WITHOUT_EFFECT.contains(&flag) => {
                if let Some(value) = inline {
                    return Err(invalid(flag, value, "this flag takes no value"));
                }
                options.without_effect.push(flag.to_owned());
            }
            _ => return Err(CliError::Unknown(flag.to_owned())),
        }
    }
    if options.config_path.is_none() && options.config_yaml.is_none() {
        return Err(CliError::NoConfig);
    }
    Ok(Invocation::Run(Box::new(options)))
}

fn invalid(flag: &str, value: &str, reason: &str) -> CliError {
    CliError::Invalid { flag: flag.to_owned(), value: value.to_owned(), reason: reason.to_owned() }
}

/// `--help` in Envoy-compatible mode.
pub const HELP: &str = "\
Outrider, started with Envoy's command line:

  outrider -c <bootstrap> [flags]      (or installed as `envoy`)

  -c, --config-path <file>         bootstrap (YAML or JSON, Envoy's format)
      --config-yaml <yaml>         bootstrap fragment merged over --config-path
      --mode serve|validate        validate: check the configuration and exit
      --concurrency <n>            worker threads (default: the CPUs available)
      --drain-time-s <s>           how long a drain waits for connections (default 600)
      --drain-strategy immediate|gradual
  -l, --log-level <level>          trace, debug, info, warning, error, critical, off
      --component-log-level <logger:level,...>
      --log-format <pattern>       JSON lines when the pattern holds %j or is a JSON object
      --log-path <file>            log to this file instead of standard error
      --admin-address-path <file>  write the admin address here once it listens
      --service-cluster, --service-node, --service-zone <value>
      --version

Accepted without effect: --disable-hot-restart, --use-dynamic-base-id, --base-id,
--base-id-path, --restart-epoch 0, --parent-shutdown-time-s, --socket-path, --socket-mode,
--local-address-ip-version, --file-flush-interval-msec, --file-flush-min-size-kb,
--allow-unknown-static-fields, --reject-unknown-dynamic-fields,
--ignore-unknown-dynamic-fields, --skip-deprecated-logs, --log-format-escaped,
--enable-fine-grain-logging, --enable-core-dump, --enable-mutex-tracing, --cpuset-threads,
--stats-tag.

Outrider's own commands: `outrider help`.
";

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> EnvoyOptions {
        match parse(args) {
            Ok(Invocation::Run(options)) => *options,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn error(args: &[&str]) -> String {
        match parse(args) {
            Err(e) => e.to_string(),
            other => panic!("{args:?} accepted: {other:?}"),
        }
    }

    /// The command line `pkg/envoy/proxy.go` of istio-agent builds.
    #[test]
    fn istio_agents_command_line() {
        let options = run(&[
            "-c",
            "etc/istio/proxy/envoy-rev.json",
            "--drain-time-s",
            "45",
            "--drain-strategy",
            "immediate",
            "--local-address-ip-version",
            "v4",
            "--file-flush-interval-msec",
            "1000",
            "--disable-hot-restart",
            "--allow-unknown-static-fields",
            "-l",
            "warning",
            "--component-log-level",
            "misc:error,upstream:debug",
            "--skip-deprecated-logs",
            "--concurrency",
            "2",
        ]);
        assert_eq!(options.config_path, Some(PathBuf::from("etc/istio/proxy/envoy-rev.json")));
        assert_eq!(options.drain_time, Duration::from_secs(45));
        assert_eq!(options.drain_strategy, DrainStrategy::Immediate);
        assert_eq!(options.concurrency, Some(2));
        assert_eq!(options.log_level.as_deref(), Some("warn"));
        assert_eq!(
            options.log_filter().as_deref(),
            Some("warn,outrider::proxy::upstream=debug,outrider::lb=debug,outrider::orca=debug")
        );
        assert_eq!(
            options.without_effect,
            [
                "--local-address-ip-version v4",
                "--file-flush-interval-msec 1000",
                "--disable-hot-restart",
                "--allow-unknown-static-fields",
                "--skip-deprecated-logs"
            ]
        );
        assert_eq!(options.mode, Mode::Serve);
    }

    #[test]
    fn envoys_other_common_flags() {
        let options = run(&[
            "--config-yaml",
            "admin: {}",
            "--mode",
            "validate",
            "--admin-address-path=/tmp/admin",
            "--log-path",
            "/tmp/log",
            "--log-format",
            "%j",
            "--service-node",
            "n",
            "--service-cluster",
            "c",
            "--base-id",
            "7",
            "--restart-epoch",
            "0",
        ]);
        assert_eq!(options.config_yaml.as_deref(), Some("admin: {}"));
        assert_eq!(options.mode, Mode::Validate);
        assert_eq!(options.admin_address_path, Some(PathBuf::from("/tmp/admin")));
        assert_eq!(options.log_path, Some(PathBuf::from("/tmp/log")));
        assert!(options.log_json());
        assert_eq!((options.service_node.as_deref(), options.service_cluster.as_deref()), (Some("n"), Some("c")));
        assert_eq!(options.drain_time, Duration::from_secs(600), "Envoy's default");
        assert_eq!(parse(&["--version"]), Ok(Invocation::Version));
        assert_eq!(parse(&["-c", "x", "--help"]), Ok(Invocation::Help));
    }

    #[test]
    fn unknown_flags_and_bad_values_are_refused() {
        assert!(error(&["-c", "x", "--frobnicate"]).starts_with("unknown flag --frobnicate"));
        assert!(error(&["-c", "x", "run"]).starts_with("unexpected argument \"run\""));
        assert_eq!(error(&["-c"]), "flag -c needs a value");
        assert!(error(&["-c", "x", "--concurrency", "two"]).contains("not a whole number"));
        assert!(error(&["-c", "x", "-l", "loud"]).contains("not one of trace"));
        assert!(error(&["-c", "x", "--component-log-level", "nonsense:debug"]).contains("not one of Envoy's loggers"));
        assert!(error(&["-c", "x", "--component-log-level", "upstream"]).contains("<logger>:<level>"));
        assert!(error(&["-c", "x", "--drain-strategy", "slow"]).contains("immediate, gradual"));
        assert!(error(&["-c", "x", "--restart-epoch", "1"]).contains("hot restart"));
        assert!(error(&["-c", "x", "--mode", "init_only"]).contains("serve and validate"));
        assert!(error(&["-c", "x", "--disable-hot-restart=yes"]).contains("takes no value"));
        assert_eq!(error(&["--concurrency", "1"]), CliError::NoConfig.to_string());
    }

    #[test]
    fn a_logger_without_counterpart_keeps_the_level() {
        let options = run(&["-c", "x", "--component-log-level", "misc:error"]);
        assert_eq!(options.log_filter().as_deref(), Some("info"));
        assert_eq!(run(&["-c", "x"]).log_filter(), None);
        assert_eq!(run(&["-c", "x", "--concurrency", "0"]).concurrency, Some(1));
    }

    #[test]
    fn envoy_mode_is_chosen_by_name_or_a_leading_flag() {
        assert!(is_envoy_command_line("/usr/local/bin/envoy", Some("run")));
        assert!(is_envoy_command_line("outrider", Some("-c")));
        assert!(!is_envoy_command_line("/usr/bin/outrider", Some("run")));
        assert!(!is_envoy_command_line("outrider", None));
    }
}
