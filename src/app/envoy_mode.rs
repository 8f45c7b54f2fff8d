//! Outrider started with Envoy's command line ([`crate::envoy_cli`]): builds the bootstrap
//! as Envoy does (`-c`, `--config-yaml` merged over it, the `--service-*` overrides), then
//! validates it (`--mode validate`) or runs it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{AppError, RunOptions};
use crate::config::bootstrap::{Bootstrap, BootstrapError, merge_document, parse_document};
use crate::envoy_cli::{self, DrainStrategy, EnvoyOptions, Invocation, Mode};

/// The whole Envoy-compatible command: `args` is the command line without the program name.
pub fn main(args: &[OsString]) -> ExitCode {
    let args: Result<Vec<String>, _> = args.iter().map(|a| a.clone().into_string()).collect();
    let Ok(args) = args else {
        eprintln!("outrider: an argument is not valid UTF-8");
        return ExitCode::FAILURE;
    };
    let options = match envoy_cli::parse(&args) {
        Ok(Invocation::Run(options)) => options,
        Ok(Invocation::Help) => {
            print!("{}", envoy_cli::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Version) => {
            println!("outrider version: {} (takes Envoy's command line and configuration)", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("outrider: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bootstrap = match bootstrap(&options) {
        Ok(bootstrap) => bootstrap,
        Err(e) => {
            eprintln!("outrider: {e}");
            return ExitCode::FAILURE;
        }
    };
    if options.mode == Mode::Validate {
        for ignored in &bootstrap.ignored {
            println!("ignored: {}: {}", ignored.path, ignored.what);
        }
        println!("configuration '{}' OK", source_name(&options));
        return ExitCode::SUCCESS;
    }
    let filter = options.log_filter();
    let logging =
        match crate::telemetry::logging::init_to(filter.as_deref(), options.log_json(), options.log_path.as_deref()) {
            Ok(logging) => logging,
            Err(e) => {
                eprintln!("outrider: {e}");
                return ExitCode::FAILURE;
            }
        };
    if !options.without_effect.is_empty() {
        tracing::info!(flags = ?options.without_effect, "Envoy flags accepted without effect");
    }
    if options.drain_strategy == DrainStrategy::Gradual {
        tracing::info!("--drain-strategy gradual: every connection is asked to close when the drain starts");
    }
    let run = RunOptions {
        config: PathBuf::from(source_name(&options)),
        concurrency: options.concurrency,
        drain_time: options.drain_time,
        logging: Some(logging),
        admin_address_path: options.admin_address_path.clone(),
        agent: None,
    };
    match super::run_bootstrap(bootstrap, run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("outrider: {e}");
            ExitCode::FAILURE
        }
    }
}

fn source_name(options: &EnvoyOptions) -> String {
    match &options.config_path {
        Some(path) => path.display().to_string(),
        None => "--config-yaml".to_owned(),
    }
}

/// The bootstrap as Envoy builds it from its command line.
pub fn bootstrap(options: &EnvoyOptions) -> Result<Bootstrap, AppError> {
    let mut document = match &options.config_path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| BootstrapError::Read { path: path.display().to_string(), source })?;
            parse_document(&text)
                .map_err(|reason| BootstrapError::Syntax { path: path.display().to_string(), reason })?
        }
        None => serde_json::Value::Object(serde_json::Map::new()),
    };
    if let Some(yaml) = &options.config_yaml {
        let overlay = parse_document(yaml)
            .map_err(|reason| BootstrapError::Syntax { path: "--config-yaml".to_owned(), reason })?;
        merge_document(&mut document, overlay);
    }
    // Envoy: the command line's node names win over the bootstrap's.
    let overrides = [("id", &options.service_node), ("cluster", &options.service_cluster)];
    for (field, value) in overrides {
        if let Some(value) = value {
            merge_document(&mut document, serde_json::json!({ "node": { field: value } }));
        }
    }
    if let Some(zone) = &options.service_zone {
        merge_document(&mut document, serde_json::json!({ "node": { "locality": { "zone": zone } } }));
    }
    Ok(Bootstrap::from_document(document)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_yaml_and_service_flags_shape_the_bootstrap() {
        let dir = tempfile::tempdir().ok();
        let path = dir.as_ref().map(|d| d.path().join("b.yaml")).unwrap_or_default();
        std::fs::write(&path, "node: { id: from-file, cluster: file-cluster }\n").ok();
        let options = EnvoyOptions {
            config_path: Some(path),
            config_yaml: Some("node: { cluster: yaml-cluster, metadata: { a: b } }".to_owned()),
            service_node: Some("from-flag".to_owned()),
            service_zone: Some("z1".to_owned()),
            ..EnvoyOptions::default()
        };
        let bootstrap = bootstrap(&options).map_err(|e| e.to_string());
        let node = bootstrap.as_ref().map(|b| b.node.clone());
        assert_eq!(node.as_ref().map(|n| n.id.as_str()), Ok("from-flag"));
        assert_eq!(node.as_ref().map(|n| n.cluster.as_str()), Ok("yaml-cluster"));
        assert_eq!(node.as_ref().map(|n| n.locality.zone.as_str()), Ok("z1"));
        assert_eq!(node.as_ref().map(|n| n.metadata.get("a").cloned()), Ok(Some(serde_json::json!("b"))));
    }

    #[test]
    fn config_yaml_alone_is_a_bootstrap() {
        let options =
            EnvoyOptions { config_yaml: Some("node: { id: only-yaml }".to_owned()), ..EnvoyOptions::default() };
        assert_eq!(bootstrap(&options).map(|b| b.node.id).map_err(|e| e.to_string()), Ok("only-yaml".to_owned()));
    }
}
