//! Keeps the module rules of `docs/architecture.md` true, read from its "## Modules" table so
//! that the rules are written in one place: each module uses only the modules its row lists,
//! nothing uses `app`, and no module's children use each other in a circle. A broken rule
//! fails with the file and line of each path that breaks it.
//!
//! Paths are read from the source's tokens (`references`): `crate::…`, grouped `use` lists,
//! `super::` and `self::`, and names imported or declared; comments are not read.
//!
//! Its modules `ledger` and `field_reads` keep the field ledger true (`docs/field-ledger.tsv`:
//! every configuration field honoured, refused or without effect) and find model fields that
//! are converted and never read (see `docs/architecture.md`, "The field ledger").
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Its modules sit in tests/architecture/ (Cargo.toml names this file as the test's root).
#[path = "architecture/circles.rs"]
mod circles;
#[path = "architecture/field_reads.rs"]
mod field_reads;
#[path = "architecture/field_reads_copy.rs"]
mod field_reads_copy;
#[path = "architecture/ledger.rs"]
mod ledger;
#[path = "architecture/ledger_data.rs"]
mod ledger_data;
#[path = "architecture/ledger_doc.rs"]
mod ledger_doc;
#[path = "architecture/ledger_scan.rs"]
mod ledger_scan;
#[path = "architecture/ledger_walk.rs"]
mod ledger_walk;
#[path = "architecture/references.rs"]
mod references;
#[path = "architecture/table.rs"]
mod table;
#[path = "architecture/tokens.rs"]
mod tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use references::{SourceFile, load_crate};
use table::MayUse;

fn package() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rules() -> BTreeMap<String, MayUse> {
    let path = package().join("docs/architecture.md");
    let document = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    table::parse(&document)
}

fn crate_files() -> Vec<SourceFile> {
    load_crate(package())
}

#[test]
fn the_modules_table_has_a_row_for_every_module() {
    let rules = rules();
    let src = package().join("src");
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        // lib.rs is the crate's root, main.rs the binary that calls `app`.
        if module && name != "lib" && name != "main" {
            modules.insert(name);
        }
    }
    let rows: BTreeSet<String> = rules.keys().cloned().collect();
    let missing: Vec<_> = modules.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&modules).collect();
    assert!(missing.is_empty(), "modules under src/ without a row in docs/architecture.md: {missing:?}");
    assert!(stale.is_empty(), "rows in docs/architecture.md for no module under src/: {stale:?}");
}

#[test]
fn modules_only_use_what_design_allows() {
    let rules = rules();
    let mut violations = Vec::new();
    for file in crate_files() {
        let Some(module) = file.module.first() else { continue };
        let may_use = rules.get(module).unwrap_or_else(|| panic!("{}: `{module}` has no row", file.path.display()));
        for reference in &file.references {
            let Some(target) = reference.target.first() else { continue };
            if target != module && rules.contains_key(target) && !may_use.allows(&file.module, target) {
                violations.push(format!("{}:{}: {module} uses {target}", file.path.display(), reference.line));
            }
        }
    }
    assert!(violations.is_empty(), "forbidden imports:\n{}", violations.join("\n"));
}

#[test]
fn nothing_imports_app() {
    let mut violations = Vec::new();
    for file in crate_files().iter().filter(|f| f.module.first().is_none_or(|m| m != "app")) {
        for reference in file.references.iter().filter(|r| r.target.first().is_some_and(|m| m == "app")) {
            violations.push(format!("{}:{}", file.path.display(), reference.line));
        }
    }
    assert!(violations.is_empty(), "app is imported at:\n{}", violations.join("\n"));
}

/// The children of each module (and its root file) as a graph, which must have no circle:
/// see `circles` for what a node and an edge are, and why a root's re-exports are none.
#[test]
fn no_circles_inside_a_module() {
    let files = crate_files();
    let mut found = Vec::new();
    for module in rules().keys() {
        let edges = circles::edges_inside(&files, module);
        for circle in circles::circles(&edges) {
            found.push(circles::describe(&circle, &edges));
        }
    }
    assert!(found.is_empty(), "{} circles between the children of a module:\n{}", found.len(), found.join("\n"));
}

/// The same at every depth (`proxy::filters`, `xds::client`, …), file to file, except that a
/// child may use what its parent's own file defines (an ancestor's shared types): an edge to
/// the module's root file is no edge here. One circle is still known: `proxy::filters`, whose
/// `http.rs` holds both the filter interfaces and the list of every filter; it goes when a
/// filter becomes one folder. Any other circle fails, and so does a known one that is gone
/// (take it off the list).
#[test]
fn no_circles_inside_a_module_at_any_depth() {
    const KNOWN: [&str; 1] =
        ["proxy::filters::compressor, proxy::filters::cors, proxy::filters::ext_authz, proxy::filters::fault, \
         proxy::filters::health_check, proxy::filters::http, proxy::filters::istio_stats, proxy::filters::istio_tcp, \
         proxy::filters::jwt_authn, proxy::filters::local_ratelimit, proxy::filters::network, \
         proxy::filters::peer_metadata, proxy::filters::ratelimit, proxy::filters::rbac, \
         proxy::filters::set_filter_state"];
    let files = crate_files();
    let mut known_seen = Vec::new();
    let modules: BTreeSet<Vec<String>> =
        files.iter().flat_map(|f| (2..f.module.len()).map(|depth| f.module[..depth].to_vec())).collect();
    let mut found = Vec::new();
    for module in modules {
        let root = module.join("::");
        let mut edges = circles::edges_inside_module(&files, &module);
        edges.retain(|(_, to), _| *to != root);
        for circle in circles::circles(&edges) {
            let members = circle.join(", ");
            if KNOWN.contains(&members.as_str()) {
                known_seen.push(members);
            } else {
                found.push(circles::describe(&circle, &edges));
            }
        }
    }
    assert!(found.is_empty(), "{} circles between the children of a module:\n{}", found.len(), found.join("\n"));
    for known in KNOWN {
        assert!(known_seen.iter().any(|seen| seen == known), "a known circle is gone; take it off the list: {known}");
    }
}

/// `docs/architecture.md` lists every lock in `proxy` (between `<!-- proxy locks -->` and
/// `<!-- end proxy locks -->`) with who takes it and how often: a lock added or removed
/// without the list changing fails here.
#[test]
fn the_locks_in_proxy_are_the_documented_ones() {
    let document = std::fs::read_to_string(package().join("docs/architecture.md")).unwrap();
    let start = document.find("<!-- proxy locks -->").expect("the proxy locks list");
    let end = document.find("<!-- end proxy locks -->").expect("the end of the proxy locks list");
    let documented: BTreeSet<String> = document[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("proxy/") && s.ends_with(".rs"))
        .map(|s| format!("src/{s}"))
        .collect();
    let mut found = BTreeSet::new();
    let mut stack = vec![package().join("src/proxy")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // The code before a file's unit tests.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                if code.contains("Mutex<") || code.contains("RwLock<") {
                    let relative = path.strip_prefix(package()).unwrap().display().to_string();
                    found.insert(relative);
                }
            }
        }
    }
    assert_eq!(found, documented, "the locks in src/proxy and docs/architecture.md's list differ");
}

/// Unit tests have one placement: a module's tests are its child module `tests`, declared
/// under `#[cfg(test)]` — inline at the end of the file, or in `<module>/tests.rs` when
/// long — never a sibling file with a name of its own or a `#[path]`. Shared test fixtures
/// (`testdata`, `test_hosts`) are named `test…` and hold no tests.
#[test]
fn unit_tests_are_a_modules_tests_child() {
    let mut files = Vec::new();
    let mut stack = vec![package().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut misplaced = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (number, _) in lines.iter().enumerate().filter(|(_, l)| **l == "#[cfg(test)]") {
            // The item the attribute is on: the next line that is not another attribute.
            let Some((at, item)) = lines.iter().enumerate().skip(number + 1).find(|(_, l)| !l.starts_with("#[")) else {
                continue;
            };
            let attributes = &lines[number + 1..at];
            let Some(name) = item
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .strip_prefix("mod ")
                .map(|rest| rest.trim_end_matches([';', '{', ' ']))
            else {
                continue;
            };
            let fixture = name.starts_with("test") && name != "tests" && !name.ends_with("tests");
            if (name != "tests" && !fixture) || attributes.iter().any(|a| a.starts_with("#[path")) {
                misplaced.push(format!("{}:{}: {item}", file.display(), at + 1));
            }
        }
    }
    assert!(misplaced.is_empty(), "unit tests placed otherwise than as a `tests` child:\n{}", misplaced.join("\n"));
}
