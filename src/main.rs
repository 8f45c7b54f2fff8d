//! The `outrider` command: parses the command line and hands over to `app`.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outrider::app::{self, RunOptions};
use outrider::config::bootstrap::Bootstrap;

#[derive(Parser)]
#[command(name = "outrider", version, about = "A service-mesh sidecar data plane configured by xDS")]
struct Cli {
    /// Log filter: a level (trace, debug, info, warn, error) or `tracing` directives
    /// (`info,outrider::xds=debug`). Default: `RUST_LOG`, else info. `/logging` changes it.
    #[arg(long, short = 'l', global = true)]
    log_level: Option<String>,
    /// Log one JSON object per line instead of text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar with an Envoy-format bootstrap file.
    Run {
        /// Bootstrap file (YAML or JSON, Envoy's format).
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Worker threads (default: the CPUs available to this process).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Seconds a drain (SIGTERM, SIGINT, `/quitquitquit`) waits for open connections.
        #[arg(long, default_value_t = 600)]
        drain_time_s: u64,
    },
    /// Install the iptables rules that send a pod's TCP traffic through the sidecar
    /// (run in the pod's network namespace, as an init container would); `--clean` removes them.
    Capture(outrider::capture::CaptureArgs),
    /// Print a manifest with the Outrider sidecar injected into its workloads
    /// (like `istioctl kube-inject`).
    Inject(outrider::inject::InjectArgs),
    /// Write the sidecar's bootstrap built from the downward API's environment
    /// (POD_NAME, POD_NAMESPACE, INSTANCE_IP, SERVICE_ACCOUNT, ISTIO_META_*).
    Bootstrap {
        /// Where to write it; `-` for standard output.
        #[arg(long, short = 'o', default_value = "-")]
        output: PathBuf,
    },
    /// Write the bootstrap built from the environment, then run with it (the injected
    /// sidecar's command).
    Sidecar {
        #[arg(long, default_value = outrider::inject::sidecar::BOOTSTRAP_PATH)]
        bootstrap: PathBuf,
        #[arg(long)]
        concurrency: Option<usize>,
        /// Seconds a drain waits for open connections (default: the agent's termination
        /// drain duration with --istio-agent, else 45, Istio's proxy drain duration).
        #[arg(long)]
        drain_time_s: Option<u64>,
        /// Do istio-agent's job in this process: get the workload certificate from istiod's
        /// CA and relay xDS to istiod, over the sockets the bootstrap names (pilot-agent's
        /// environment: CA_ADDR, PROXY_CONFIG, SECRET_TTL, …). One process per pod.
        #[arg(long)]
        istio_agent: bool,
    },
    /// pilot-agent's command line (`proxy waypoint --domain …`, as Istio's gateway and
    /// waypoint templates give it): `sidecar --istio-agent` as that proxy type.
    Proxy {
        /// The proxy type (sidecar or waypoint), then pilot-agent's flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Check a bootstrap file and list what Outrider would ignore in it.
    Validate {
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    // The test kit's commands (the `testkit` feature, on by default; not in the image).
    #[cfg(feature = "testkit")]
    /// Run an embedded control plane serving deploy/demo/resources.yaml, and Outrider against it.
    Demo {
        /// Where the embedded control plane listens.
        #[arg(long, default_value = "127.0.0.1:18000")]
        xds_address: std::net::SocketAddr,
        /// Where Outrider's admin server listens.
        #[arg(long, default_value = "127.0.0.1:15000")]
        admin_address: std::net::SocketAddr,
        /// Resources file to serve (Envoy's file-based xDS format).
        #[arg(long)]
        resources: Option<PathBuf>,
        /// The demo cluster's policy: adaptive (the default), round_robin, least_request, random, ring_hash,
        /// maglev, cswrr, peak_ewma.
        #[arg(long)]
        policy: Option<String>,
        /// Do not start the demo backends (when 18081–18083 are taken by your own).
        #[arg(long)]
        no_backends: bool,
    },
    #[cfg(feature = "testkit")]
    /// Serve the scenario lab's backends (bench/scenarios/*.yaml), optionally with the
    /// control plane both proxies are pointed at.
    LabBackend {
        /// Scenario file; its `backends` section is read.
        #[arg(long)]
        scenario: PathBuf,
        /// Serve ADS on this address from `--resources` (watched for changes).
        #[arg(long, requires = "resources")]
        xds_address: Option<std::net::SocketAddr>,
        /// Resources file (Envoy's file-based xDS format) for `--xds-address`.
        #[arg(long, requires = "xds_address")]
        resources: Option<PathBuf>,
        /// Write what each backend served, per second, here (JSON) on exit.
        #[arg(long)]
        report: Option<PathBuf>,
    },
}

// Heap profilers (heaptrack, valgrind's massif) see only the system allocator's calls:
// `--features system-allocator` builds without mimalloc for them.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: outrider::core::allocator::Global = mimalloc::MiMalloc;

// The allocator's options are set before the first allocation (see
// `core::allocator::configure`): the runtime allocates before `main`, and an arena reserved
// by then keeps the options it was reserved with. A constructor runs before that.
#[cfg(all(target_os = "linux", not(feature = "system-allocator")))]
#[allow(unsafe_code)] // a constructor: the one thing this file does that Rust cannot check
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE_ALLOCATOR: extern "C" fn() = {
    extern "C" fn configure() {
        outrider::core::allocator::configure();
    }
    configure
};

fn main() -> ExitCode {
    // Envoy's command line (`outrider -c ...`, or installed as `envoy`): see `app::envoy_mode`.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let argv0 = args.first().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    let first = args.get(1).map(|a| a.to_string_lossy());
    if outrider::envoy_cli::is_envoy_command_line(&argv0, first.as_deref()) {
        return app::envoy_mode::main(args.get(1..).unwrap_or_default());
    }
    let cli = Cli::parse();
    if let Command::Proxy { args } = &cli.command {
        return proxy(args, &cli);
    }
    let logging = match outrider::telemetry::logging::init(cli.log_level.as_deref(), cli.log_json) {
        Ok(logging) => logging,
        Err(e) => {
            eprintln!("outrider: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Run { config, concurrency, drain_time_s } => match app::run(RunOptions {
            config,
            concurrency,
            drain_time: std::time::Duration::from_secs(drain_time_s),
            logging: Some(logging),
            admin_address_path: None,
            agent: None,
        }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("outrider: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { config } => validate(&config),
        Command::Inject(args) => match outrider::inject::run(&args) {
            Ok(manifest) => {
                print!("{manifest}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("outrider inject: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Bootstrap { output } => {
            match outrider::inject::write_bootstrap(&outrider::inject::process_env(), &output) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("outrider bootstrap: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Sidecar { bootstrap, concurrency, drain_time_s, istio_agent } => {
            let sidecar = Sidecar { bootstrap, concurrency, drain_time_s, istio_agent };
            run_sidecar("outrider sidecar", outrider::inject::process_env(), sidecar, logging)
        }
        // Handled before the log starts: its flags set the log's level.
        Command::Proxy { .. } => ExitCode::FAILURE,
        Command::Capture(args) => match outrider::capture::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("outrider capture: {e}");
                ExitCode::FAILURE
            }
        },
        #[cfg(feature = "testkit")]
        Command::Demo { xds_address, admin_address, resources, policy, no_backends } => {
            let options =
                app::demo::DemoOptions { xds_address, admin_address, resources, policy, backends: !no_backends };
            match app::demo::run(options) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("outrider: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        #[cfg(feature = "testkit")]
        Command::LabBackend { scenario, xds_address, resources, report } => {
            let options = app::lab::LabOptions { scenario, xds: xds_address.zip(resources), report };
            match app::lab::run(options) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("outrider: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// What `outrider sidecar` was asked for.
struct Sidecar {
    bootstrap: PathBuf,
    concurrency: Option<usize>,
    drain_time_s: Option<u64>,
    istio_agent: bool,
}

/// Writes the bootstrap built from `env`, then runs with it.
fn run_sidecar(
    name: &str,
    env: std::collections::BTreeMap<String, String>,
    sidecar: Sidecar,
    logging: outrider::telemetry::logging::LogControl,
) -> ExitCode {
    let Sidecar { bootstrap, concurrency, drain_time_s, istio_agent } = sidecar;
    if let Err(e) = outrider::inject::write_bootstrap(&env, &bootstrap) {
        eprintln!("{name}: {e}");
        return ExitCode::FAILURE;
    }
    let agent = match istio_agent.then(|| outrider::agent::AgentSettings::from_env(&env)).transpose() {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let drain_time = match (drain_time_s, &agent) {
        (Some(seconds), _) => std::time::Duration::from_secs(seconds),
        (None, Some(agent)) => agent.termination_drain,
        (None, None) => std::time::Duration::from_secs(45),
    };
    let options = RunOptions {
        config: bootstrap,
        concurrency,
        drain_time,
        logging: Some(logging),
        admin_address_path: None,
        agent,
    };
    match app::run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outrider: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `outrider proxy <type> [pilot-agent flags]`: `sidecar --istio-agent` as that proxy type,
/// the bootstrap where the injected sidecar's is (relative: the proxy runs from `/`).
fn proxy(args: &[String], cli: &Cli) -> ExitCode {
    use outrider::inject::{bootstrap, proxy_command};
    let command = match proxy_command::parse(args) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("outrider proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    let level = match command.log_level.as_deref().map(|l| outrider::envoy_cli::level("--proxyLogLevel", l)) {
        Some(Err(e)) => {
            eprintln!("outrider proxy: {e}");
            return ExitCode::FAILURE;
        }
        Some(Ok(level)) => Some(level),
        None => cli.log_level.clone(),
    };
    let logging = match outrider::telemetry::logging::init(level.as_deref(), cli.log_json || command.log_json) {
        Ok(logging) => logging,
        Err(e) => {
            eprintln!("outrider: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut env = outrider::inject::process_env();
    env.insert(bootstrap::PROXY_TYPE_VARIABLE.to_owned(), command.proxy_type.name().to_owned());
    if let Some(domain) = command.dns_domain {
        env.entry(bootstrap::DNS_DOMAIN_VARIABLE.to_owned()).or_insert(domain);
    }
    let path = PathBuf::from(".").join(outrider::inject::sidecar::BOOTSTRAP_PATH.trim_start_matches('/'));
    let sidecar = Sidecar { bootstrap: path, concurrency: command.concurrency, drain_time_s: None, istio_agent: true };
    run_sidecar("outrider proxy", env, sidecar, logging)
}

fn validate(path: &std::path::Path) -> ExitCode {
    match Bootstrap::load(path) {
        Ok(bootstrap) => {
            for ignored in &bootstrap.ignored {
                println!("ignored: {}: {}", ignored.path, ignored.what);
            }
            println!(
                "{}: valid ({} static listeners, {} static clusters, {} ignored fields)",
                path.display(),
                bootstrap.static_listeners.len(),
                bootstrap.static_clusters.len(),
                bootstrap.ignored.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: invalid: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
