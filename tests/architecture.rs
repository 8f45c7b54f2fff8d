//! Keeps the module import rules of `docs/architecture.md` true: each module may use only the modules
#![allow(clippy::unwrap_used)]
//! listed for it. A forbidden `crate::…` reference fails this test with file and line.

use std::collections::BTreeMap;
use std::path::Path;

/// module → modules it may use. `pb` (the protobuf messages) is listed where protos are
/// the module's business. `admin` reads the snapshot, whose contents are `config` types.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([
        ("core", &[][..]),
        ("capture", &["core"][..]),
        ("inject", &["core"][..]),
        ("pb", &[][..]),
        ("telemetry", &["core"][..]),
        ("config", &["core", "pb"][..]),
        ("store", &["config", "core"][..]),
        ("xds", &["store", "config", "telemetry", "core", "pb"][..]),
        ("lb", &["config", "telemetry", "core"][..]),
        ("orca", &["lb", "telemetry", "core", "pb"][..]),
        ("tls", &["config", "telemetry", "core"][..]),
        // `pb`: the wire messages of the gRPC services filters call (ext_authz's Check, the
        // rate limit service), never configuration.
        ("proxy", &["store", "config", "lb", "orca", "tls", "telemetry", "core", "pb"][..]),
        ("health", &["store", "config", "lb", "tls", "telemetry", "core"][..]),
        ("admin", &["store", "config", "lb", "telemetry", "core", "pb"][..]),
        (
            "app",
            &["core", "telemetry", "config", "store", "xds", "lb", "orca", "tls", "proxy", "health", "admin", "pb"][..],
        ),
    ])
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn modules_only_use_what_design_allows() {
    let allowed = allowed();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for (module, may_use) in &allowed {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files);
        let single = src.join(format!("{module}.rs"));
        if single.exists() {
            files.push(single);
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let in_convert = file.components().any(|c| c.as_os_str() == "convert");
            for (number, line) in text.lines().enumerate() {
                let mut rest = line;
                while let Some(at) = rest.find("crate::") {
                    rest = &rest[at + "crate::".len()..];
                    let target: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    let forbidden = target != *module
                        && allowed.contains_key(target.as_str())
                        && (!may_use.contains(&target.as_str())
                            || (*module == "config" && target == "pb" && !in_convert));
                    if forbidden {
                        violations.push(format!("{}:{}: {module} uses {target}", file.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(violations.is_empty(), "forbidden imports:\n{}", violations.join("\n"));
}

#[test]
fn nothing_imports_app() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for file in files.iter().filter(|f| !f.starts_with(src.join("app")) && !f.ends_with("main.rs")) {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        assert!(!text.contains("crate::app"), "{} imports app", file.display());
    }
}
