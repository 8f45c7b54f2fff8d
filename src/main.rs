//! The `outrider` command: parses the command line and hands over to `app`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outrider::app::{self, RunOptions};
use outrider::config::bootstrap::Bootstrap;

#[derive(Parser)]
#[command(name = "outrider", version, about = "A service-mesh sidecar data plane configured by xDS")]
struct Cli {
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
    },
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
        /// The demo cluster's policy: round_robin, least_request, random, ring_hash, maglev, cswrr, peak_ewma.
        #[arg(long)]
        policy: Option<String>,
        /// Do not start the demo backends (when 18081–18083 are taken by your own).
        #[arg(long)]
        no_backends: bool,
    },
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
    /// Check a bootstrap file and list what Outrider would ignore in it.
    Validate {
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run { config, concurrency } => match app::run(RunOptions { config, concurrency }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("outrider: {e}");
                ExitCode::FAILURE
            }
        },
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
        Command::Validate { config } => validate(&config),
    }
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
