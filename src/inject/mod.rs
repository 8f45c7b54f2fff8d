//! Kubernetes injection: `outrider inject` adds Outrider to workloads' pod templates the
//! way `istioctl kube-inject` adds Envoy (capture init container, native sidecar, Istio's
//! volumes, labels and annotations), and `outrider bootstrap` builds the sidecar's
//! Envoy-format bootstrap from the downward API's environment, as `pilot-agent` does.
//!
//! Injection works on the YAML text: documents that hold no pod, or whose pod is left
//! alone, are written back byte for byte; injected ones are re-serialised (keys sorted).

mod app_cpu;
pub mod bootstrap;
mod error;
pub mod probes;
pub mod proxy_command;
pub mod sidecar;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use bootstrap::PodInfo;

mod agent_defaults {
    /// istiod's TLS port in a default install.
    pub const DISCOVERY_ADDRESS: &str = "istiod.istio-system.svc:15012";
}
pub use error::InjectError;
pub use sidecar::Settings;
pub use workload::Outcome;

/// The command line of `outrider inject`.
#[derive(Debug, Clone, clap::Args)]
pub struct InjectArgs {
    /// Manifest file (multi-document YAML); `-` reads standard input.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// The Outrider image for both injected containers.
    #[arg(long, default_value = concat!("outrider:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// The image of the capture init container, which needs iptables (the `init` target of
    /// `deploy/Dockerfile`); default: `--image`.
    #[arg(long)]
    pub init_image: Option<String>,
    /// A control plane reached directly at `host:port` (plaintext gRPC, e.g.
    /// `istiod.istio-system.svc:15010`) instead of doing istio-agent's job.
    #[arg(long)]
    pub xds_address: Option<String>,
    /// Where the sidecar, doing istio-agent's job (the default), finds istiod's CA and
    /// discovery over TLS (`PROXY_CONFIG`'s `discoveryAddress`).
    #[arg(long, default_value = agent_defaults::DISCOVERY_ADDRESS, conflicts_with = "xds_address")]
    pub discovery_address: String,
    /// `ISTIO_META_CLUSTER_ID`: the cluster's name in the mesh.
    #[arg(long, default_value = "Kubernetes")]
    pub cluster_id: String,
    /// `ISTIO_META_MESH_ID`.
    #[arg(long, default_value = "cluster.local")]
    pub mesh_id: String,
    /// Under istio-agent: add no containers, but ask Istio's own injection (annotation
    /// `sidecar.istio.io/proxyImage`) for `--image`, an `istio/proxyv2` image with Outrider
    /// as `/usr/local/bin/envoy` (`deploy/Dockerfile`, target `istio-proxy`). The pod keeps
    /// Istio's `istio-proxy` container running pilot-agent, which starts Outrider.
    #[arg(long, conflicts_with_all = ["init_image", "xds_address"])]
    pub agent: bool,
    /// `KEY=VALUE`: an environment variable for every injected sidecar, as ProxyConfig's
    /// `proxyMetadata` in `meshConfig.defaultConfig` gives one (e.g.
    /// `ISTIO_META_OUTRIDER_LB=adaptive`); a pod's `proxy.istio.io/config` annotation adds
    /// its own and overrides these. Repeatable.
    #[arg(long = "proxy-metadata", value_parser = proxy_metadata_entry, conflicts_with = "agent")]
    pub proxy_metadata: Vec<(String, String)>,
}

impl InjectArgs {
    pub fn settings(&self) -> Settings {
        Settings {
            image: self.image.clone(),
            init_image: self.init_image.clone().unwrap_or_else(|| self.image.clone()),
            xds_address: self.xds_address.clone(),
            discovery_address: self.discovery_address.clone(),
            cluster_id: self.cluster_id.clone(),
            mesh_id: self.mesh_id.clone(),
            agent: self.agent,
            proxy_metadata: self.proxy_metadata.iter().cloned().collect(),
        }
    }
}

/// One `--proxy-metadata` entry.
fn proxy_metadata_entry(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Reads the manifest named by `args` and returns it with the sidecar injected.
pub fn run(args: &InjectArgs) -> Result<String, InjectError> {
    let path = args.file.display().to_string();
    let text =
        if path == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(&args.file) }
            .map_err(|source| InjectError::Read { path, source })?;
    inject_text(&text, &args.settings()).map(|(out, _)| out)
}

/// Injects every document of `text`; returns the new text and each document's outcome.
pub fn inject_text(text: &str, settings: &Settings) -> Result<(String, Vec<Outcome>), InjectError> {
    let mut out = String::with_capacity(text.len() * 2);
    let mut outcomes = Vec::new();
    for (index, document) in documents(text).into_iter().enumerate() {
        if index > 0 {
            out.push_str("---\n");
        }
        let content = document.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let mut object: serde_json::Value = if content {
            serde_saphyr::from_str(document).map_err(|e| InjectError::Manifest { index, why: e.to_string() })?
        } else {
            serde_json::Value::Null
        };
        let results = workload::inject(&mut object, settings).map_err(|why| InjectError::Manifest { index, why })?;
        if results.contains(&Outcome::Injected) {
            let yaml =
                serde_saphyr::to_string(&object).map_err(|e| InjectError::Manifest { index, why: e.to_string() })?;
            out.push_str(&yaml);
        } else {
            out.push_str(document);
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        outcomes.extend(results);
    }
    Ok((out, outcomes))
}

/// Splits a YAML stream at its `---` document markers (at the start of a line), keeping
/// each document's text as written.
fn documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let rest = line.strip_prefix("---").filter(|rest| rest.trim().is_empty() || rest.starts_with([' ', '\t']));
        if let Some(rest) = rest {
            if offset > start || !documents.is_empty() {
                documents.push(&text[start..offset]);
            }
            // `--- {kind: Pod, …}`: the document starts on the marker's line.
            let inline = !rest.trim().is_empty() && !rest.trim_start().starts_with('#');
            start = offset + if inline { 3 } else { line.len() };
        }
        offset += line.len();
    }
    if start < text.len() || documents.is_empty() {
        documents.push(&text[start..]);
    }
    documents
}

/// The process environment, for [`PodInfo::from_env`].
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

/// Builds the sidecar's bootstrap from the environment, and the pod's labels from the
/// downward API's file when the pod has it, and writes it to `output` (or standard output
/// for `-`).
pub fn write_bootstrap(env: &BTreeMap<String, String>, output: &std::path::Path) -> Result<(), InjectError> {
    let mut pod = PodInfo::from_env(env)?;
    let labels = std::path::Path::new(bootstrap::POD_LABELS_PATH);
    match std::fs::read_to_string(labels) {
        Ok(text) => pod = pod.with_downward_labels(&text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(InjectError::Read { path: labels.display().to_string(), source }),
    }
    let document = pod.bootstrap();
    let text = format!("{document:#}\n");
    if output.as_os_str() == "-" {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(output, text).map_err(|source| InjectError::Write { path: output.display().to_string(), source })
}

#[cfg(test)]
mod tests;
