//! Resources from files in Envoy's own format, as Envoy's file-based xDS reads them: a YAML
//! or JSON document with a top-level `resources:` list whose items carry `@type` and the
//! resource in protobuf's JSON mapping; or a directory of such files (`.yaml`, `.yml`,
//! `.json`), merged.
//!
//! [`FileSource`] republishes on every change; a file that does not parse keeps the last
//! good resources, so a half-written edit never empties a running demo.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

use super::XdsServer;
use crate::config::ResourceType;
use crate::pb::envoy::config::route::v3 as route;
use crate::pb::envoy::config::{cluster::v3 as cluster, endpoint::v3 as endpoint, listener::v3 as listener};
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use crate::pb::google::protobuf::Any;

/// How often [`FileSource::watch`] looks at the files.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Every type's resources (name, packed message), for all five types, by type URL.
pub type ResourceSet = BTreeMap<ResourceType, Vec<(String, Any)>>;

/// A file that could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

/// Reads the resources of a file, or of every YAML/JSON file of a directory.
pub fn load(path: &Path) -> Result<ResourceSet, FileError> {
    parse(&read(path)?, &mut Packed::new())
}

/// Each resource item already packed, by its canonical JSON text. Encoding a message with
/// map fields (metadata, `Struct`) puts the entries in a different order each time, so an
/// item read again is given its earlier bytes: an unchanged resource is never pushed as a
/// change, and is not decoded again.
type Packed = HashMap<String, (ResourceType, String, Any)>;

/// Keeps an [`XdsServer`] in step with a file or directory.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    server: XdsServer,
    /// Hash of the names and contents last looked at, good or bad.
    fingerprint: Option<u64>,
    /// The items of the last good reload, packed.
    packed: Packed,
}

impl FileSource {
    pub fn new(path: impl Into<PathBuf>, server: XdsServer) -> Self {
        FileSource { path: path.into(), server, fingerprint: None, packed: Packed::new() }
    }

    /// Reads the files; if their contents changed, parses them and sets every type's
    /// resources on the server. Returns whether it published. On an error the server keeps
    /// what it has, and the same contents are not reported again.
    pub fn reload(&mut self) -> Result<bool, FileError> {
        let files = read(&self.path)?;
        let mut hasher = DefaultHasher::new();
        files.hash(&mut hasher);
        let fingerprint = Some(hasher.finish());
        if fingerprint == self.fingerprint {
            return Ok(false);
        }
        self.fingerprint = fingerprint;
        let mut packed = std::mem::take(&mut self.packed);
        let parsed = parse(&files, &mut packed);
        self.packed = packed;
        for (resource_type, resources) in parsed? {
            self.server.set_resources(resource_type.type_url(), resources);
        }
        Ok(true)
    }

    /// Loads `path` into `server` now and then every [`POLL_INTERVAL`], logging failures
    /// (once per distinct failure). Abort the task to stop watching.
    pub fn watch(path: impl Into<PathBuf>, server: XdsServer) -> JoinHandle<()> {
        let mut source = FileSource::new(path, server);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(POLL_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_error = None;
            loop {
                interval.tick().await;
                match source.reload() {
                    Ok(true) => tracing::info!(path = %source.path.display(), "xds server: resources reloaded"),
                    Ok(false) => {}
                    Err(error) => {
                        let message = error.to_string();
                        if last_error.as_ref() != Some(&message) {
                            tracing::warn!(%error, "xds server: keeping the last good resources");
                        }
                        last_error = Some(message);
                        continue;
                    }
                }
                last_error = None;
            }
        })
    }
}

/// The files to read, in a stable order, with their contents.
fn read(path: &Path) -> Result<Vec<(PathBuf, String)>, FileError> {
    let io = |source| FileError::Io { path: path.to_owned(), source };
    let paths = if path.is_dir() {
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(path).map_err(io)? {
            let entry_path = entry.map_err(io)?.path();
            let ext = entry_path.extension().and_then(|e| e.to_str()).unwrap_or_default();
            if matches!(ext, "yaml" | "yml" | "json") && entry_path.is_file() {
                paths.push(entry_path);
            }
        }
        paths.sort();
        paths
    } else {
        vec![path.to_owned()]
    };
    paths
        .into_iter()
        .map(|p| match std::fs::read_to_string(&p) {
            Ok(text) => Ok((p, text)),
            Err(source) => Err(FileError::Io { path: p, source }),
        })
        .collect()
}

/// Parses every file; `packed` holds the items of the previous parse and is left holding
/// this one's.
fn parse(files: &[(PathBuf, String)], packed: &mut Packed) -> Result<ResourceSet, FileError> {
    let previous = std::mem::take(packed);
    let mut names = std::collections::HashSet::new();
    // One descriptor pool for every resource of the set, not one decode per resource.
    let _descriptors = crate::pb::json::pool();
    let mut set: ResourceSet = ResourceType::ALL.into_iter().map(|t| (t, Vec::new())).collect();
    for (path, text) in files {
        let invalid = |reason: String| FileError::Invalid { path: path.clone(), reason };
        let value: Value = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?
        };
        let Some(items) = value.get("resources").and_then(Value::as_array) else {
            return Err(invalid("expected a top-level `resources` list".into()));
        };
        for (i, item) in items.iter().enumerate() {
            // serde_json's objects are sorted maps: equal items print the same text.
            let text = item.to_string();
            let (resource_type, name, any) = match previous.get(&text) {
                Some(earlier) => earlier.clone(),
                None => resource(item.clone()).map_err(|e| invalid(format!("resources[{i}]: {e}")))?,
            };
            packed.insert(text, (resource_type, name.clone(), any.clone()));
            if !names.insert((resource_type, name.clone())) {
                return Err(invalid(format!("resources[{i}]: duplicate {} `{name}`", resource_type.short_name())));
            }
            set.entry(resource_type).or_default().push((name, any));
        }
    }
    Ok(set)
}

/// One `resources` item: its type, name and packed message.
fn resource(mut item: Value) -> Result<(ResourceType, String, Any), String> {
    let Some(map) = item.as_object_mut() else { return Err("expected an object".into()) };
    let type_url = match map.remove("@type") {
        Some(Value::String(t)) => t,
        _ => return Err("missing `@type`".into()),
    };
    let resource_type =
        ResourceType::from_type_url(&type_url).ok_or_else(|| format!("unsupported resource type {type_url}"))?;
    let (name, value) = match resource_type {
        ResourceType::Listener => pack::<listener::Listener>(&type_url, item, |m| &m.name)?,
        ResourceType::RouteConfiguration => pack::<route::RouteConfiguration>(&type_url, item, |m| &m.name)?,
        ResourceType::Cluster => pack::<cluster::Cluster>(&type_url, item, |m| &m.name)?,
        ResourceType::ClusterLoadAssignment => {
            pack::<endpoint::ClusterLoadAssignment>(&type_url, item, |m| &m.cluster_name)?
        }
        ResourceType::Secret => pack::<tls::Secret>(&type_url, item, |m| &m.name)?,
    };
    Ok((resource_type, name, Any { type_url, value }))
}

/// Reads `value` as `M` and encodes it. Fields the descriptors do not know are dropped
/// with a warning: the control plane serves what it understood.
fn pack<M: prost::Message + Default>(
    type_url: &str,
    value: Value,
    name: impl Fn(&M) -> &String,
) -> Result<(String, Vec<u8>), String> {
    let full_name = type_url.rsplit('/').next().unwrap_or(type_url);
    let (message, dropped) = crate::pb::json::from_value::<M>(full_name, value).map_err(|e| e.to_string())?;
    let name = name(&message).clone();
    if name.is_empty() {
        return Err(format!("{full_name} has no name"));
    }
    for d in dropped {
        tracing::warn!(resource = %name, path = %d.path, what = %d.what, "xds server: field dropped");
    }
    Ok((name, message.encode_to_vec()))
}

#[cfg(test)]
mod tests;
