//! No field of the configuration model is converted and then read by nothing: the copy of
//! the package made by `field_reads_copy` is checked with `cargo check --lib`, and every
//! field the dead-code lint reports as never read must be listed, with the reason, in
//! `docs/field-ledger-unread.tsv` (`file<TAB>Struct.field<TAB>reason`). A new unread field
//! fails the test; so does a listed field that is now read (take it off the list).
//!
//! Covers every named-field, non-generic struct under `src/config/` outside the converters;
//! not the fields of enum variants (the lint does not see them) nor tuple structs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::field_reads_copy::{copy_package, rewrite_model, scratch};
use crate::package;

/// `(file, "Struct.field")` of every field the lint finds unread in the copy.
fn unread_fields() -> BTreeSet<(String, String)> {
    let root = scratch();
    let copy = root.join("package");
    copy_package(package(), &copy);
    never_read(&copy, &root.join("target"))
}

/// Runs `cargo check --lib` on the package at `dir` and collects the fields its dead-code
/// lint reports as never read.
fn never_read(dir: &Path, target: &Path) -> BTreeSet<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["check", "--lib", "--offline", "--message-format=json", "--target-dir"])
        .arg(target)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap_or_else(|e| panic!("cargo check: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo check of the rewritten copy in {} failed:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr),
        stdout.lines().filter_map(rendered).collect::<Vec<_>>().join("\n")
    );
    let mut unread = BTreeSet::new();
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let diagnostic = &message["message"];
        let text = diagnostic["message"].as_str().unwrap_or_default();
        if diagnostic["code"]["code"] != "dead_code" || !text.ends_with("never read") {
            continue;
        }
        let spans = diagnostic["spans"].as_array().cloned().unwrap_or_default();
        // The struct is the one label that is not primary ("fields in this struct").
        let owner = spans.iter().find(|s| s["is_primary"] == false).map(highlighted).unwrap_or_default();
        for span in spans.iter().filter(|s| s["is_primary"] == true) {
            let file = span["file_name"].as_str().unwrap_or_default().to_owned();
            unread.insert((file, format!("{owner}.{}", highlighted(span))));
        }
    }
    unread
}

/// The source text a diagnostic's span points at: a struct's or a field's name.
fn highlighted(span: &serde_json::Value) -> String {
    let text = &span["text"][0];
    let line = text["text"].as_str().unwrap_or_default();
    let column = |key: &str| text[key].as_u64().and_then(|c| usize::try_from(c).ok()).unwrap_or(1).saturating_sub(1);
    line.get(column("highlight_start")..column("highlight_end")).unwrap_or_default().to_owned()
}

fn rendered(line: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value["message"]["rendered"].as_str().filter(|r| r.contains("error")).map(str::to_owned)
}

fn listed() -> BTreeMap<(String, String), String> {
    let path = package().join("docs/field-ledger-unread.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut listed = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
        let columns: Vec<&str> = line.split('\t').collect();
        let [file, field, reason] = columns[..] else {
            panic!("{}:{}: expected file<TAB>Struct.field<TAB>reason", path.display(), i + 1)
        };
        assert!(!reason.trim().is_empty(), "{}:{}: {field} has no reason", path.display(), i + 1);
        listed.insert((file.to_owned(), field.to_owned()), reason.to_owned());
    }
    listed
}

#[test]
fn no_configuration_field_is_converted_and_never_read() {
    let unread = unread_fields();
    let listed = listed();
    let new: Vec<String> = unread
        .iter()
        .filter(|key| !listed.contains_key(*key))
        .map(|(file, field)| format!("{file}\t{field}"))
        .collect();
    let read: Vec<String> =
        listed.keys().filter(|key| !unread.contains(*key)).map(|(file, field)| format!("{file}\t{field}")).collect();
    assert!(
        new.is_empty(),
        "configuration fields that nothing reads (act on each, refuse it in the converter, or list it with \
         the reason in docs/field-ledger-unread.tsv):\n{}",
        new.join("\n")
    );
    assert!(read.is_empty(), "read now; take them off docs/field-ledger-unread.tsv:\n{}", read.join("\n"));
}

/// The means itself, on a crate of one file: a model struct deriving `PartialEq`, `Eq` and
/// `Hash`, compared by the crate, with one field nothing reads. As written, the lint reports
/// nothing; rewritten as the copy is, it reports that field and no other.
#[test]
fn the_rewrite_lets_the_lint_see_an_unread_field() {
    let model = "#[derive(Debug, Clone, PartialEq, Eq, Hash)]\n\
                 pub struct Model {\n    pub read: u32,\n    pub unread: u32,\n}\n\
                 pub fn make() -> Model {\n    Model { read: 1, unread: 2 }\n}\n\
                 pub fn read(model: &Model) -> u32 {\n    model.read\n}\n\
                 pub fn same(a: &Model, b: &Model) -> bool {\n    a == b\n}\n";
    let root = scratch().join("proof");
    let manifest = "[package]\nname = \"proof\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[lib]\npath = \"lib.rs\"\n";
    let check = |name: &str, source: &str| {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
        std::fs::write(dir.join("lib.rs"), source).unwrap();
        never_read(&dir, &root.join("target"))
    };
    assert!(check("as_written", model).is_empty(), "derived PartialEq and pub fields hide every field from the lint");
    let found = check("rewritten", &rewrite_model(model));
    let expected = BTreeSet::from([("lib.rs".to_owned(), "Model.unread".to_owned())]);
    assert_eq!(found, expected);
}
