//! A copy of the package in which the compiler's dead-code lint can see which fields of the
//! configuration model the crate never reads.
//!
//! In the real sources the lint is blind to them twice over: the fields are `pub` (a library's
//! public field may be read by another crate), and nearly every model struct derives
//! `PartialEq` (and often `Eq`, `Hash`, `Ord`), whose generated code reads every field —
//! only derived `Debug` and `Clone` are ignored by the lint. In the copy, every named-field,
//! non-generic struct under `src/config/` (the converters in `src/config/convert/` left as
//! they are) gets:
//! - its `pub` fields made `pub(crate)`;
//! - its derived comparisons and hashes replaced by impls that read no field (`eq` is
//!   `false`, `hash` hashes nothing, `cmp` is `Equal`), so that the code comparing and
//!   hashing configurations still compiles. The copy is only checked, never run.
//!
//! What the lint then reports as "never read" is converted (the converters write it) and
//! looked at by nothing: neither the proxy, nor the balancers, nor anything else in the
//! library. Reads in `#[cfg(test)]` code and in the integration tests do not count.

use std::path::{Path, PathBuf};

/// The derives whose generated code reads every field.
const READING_DERIVES: [&str; 5] = ["PartialEq", "Eq", "Hash", "PartialOrd", "Ord"];

/// Copies what `cargo check --lib` needs of the package at `from` into `to`, rewriting the
/// model as described above. A file is written only when its contents change, so that an
/// unchanged tree checks again in moments.
pub fn copy_package(from: &Path, to: &Path) {
    let manifest = std::fs::read_to_string(from.join("Cargo.toml")).unwrap();
    write_if_changed(&to.join("Cargo.toml"), &manifest_for_copy(&manifest, from));
    for file in ["Cargo.lock", "build.rs"] {
        write_if_changed(&to.join(file), &std::fs::read_to_string(from.join(file)).unwrap());
    }
    // `include_str!` reaches into deploy/ and tests/data/.
    for dir in ["src", "proto", "deploy", "tests/data"] {
        copy_tree(&from.join(dir), &to.join(dir), &|path, text| {
            let relative = path.strip_prefix(from).unwrap_or(path);
            let model = relative.starts_with("src/config") && !relative.starts_with("src/config/convert");
            if model && path.extension().is_some_and(|e| e == "rs") {
                String::from_utf8(text.to_vec()).map(|source| rewrite_model(&source).into_bytes()).unwrap_or_default()
            } else {
                text.to_vec()
            }
        });
    }
}

/// The manifest without the test and bench targets (their files are not copied), with the
/// patched crates' paths pointing back at the package's own `vendor/`.
fn manifest_for_copy(manifest: &str, package: &Path) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            skipping = matches!(line.trim(), "[[test]]" | "[[bench]]");
        }
        if !skipping {
            out.push_str(&line.replace("path = \"vendor/", &format!("path = \"{}/vendor/", package.display())));
            out.push('\n');
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path, transform: &dyn Fn(&Path, &[u8]) -> Vec<u8>) {
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())).flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target, transform);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            write_bytes_if_changed(&target, &transform(&path, &bytes));
        }
    }
}

fn write_if_changed(path: &Path, text: &str) {
    write_bytes_if_changed(path, text.as_bytes());
}

fn write_bytes_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return;
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// One model file rewritten: see the module's comment.
pub fn rewrite_model(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut impls = String::new();
    // The indentation of the struct whose fields are being made crate-visible.
    let mut inside: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        if let Some(indent) = inside {
            if line.trim() == "}" && indentation(line) == indent {
                inside = None;
            } else if indentation(line) == indent + 4
                && let Some(rest) = line.trim_start().strip_prefix("pub ")
            {
                out.push(format!("{}pub(crate) {rest}", " ".repeat(indent + 4)));
                continue;
            }
        }
        if named_struct(line).is_some() {
            inside = Some(indentation(line));
        }
        if let Some(derives) = derive_list(line)
            && let Some(name) =
                lines[i + 1..].iter().find(|l| !is_attribute_or_comment(l)).and_then(|l| named_struct(l))
        {
            let (reading, kept): (Vec<&str>, Vec<&str>) =
                derives.into_iter().partition(|d| READING_DERIVES.contains(d));
            if !reading.is_empty() {
                if !kept.is_empty() {
                    out.push(format!("{}#[derive({})]", " ".repeat(indentation(line)), kept.join(", ")));
                }
                for derive in reading {
                    impls.push_str(&blind_impl(derive, &name));
                }
                continue;
            }
        }
        out.push((*line).to_owned());
    }
    let mut text = out.join("\n");
    text.push('\n');
    text.push_str(&impls);
    text
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_attribute_or_comment(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("#[") || line.starts_with("//")
}

/// `Name` of a `[pub[(…)]] struct Name {` line: named fields, no generics.
fn named_struct(line: &str) -> Option<String> {
    let line = line.trim();
    let rest = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub(super) ")).unwrap_or(line);
    let rest = rest.strip_prefix("pub ").unwrap_or(rest);
    let name = rest.strip_prefix("struct ")?.strip_suffix('{')?.trim();
    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then(|| name.to_owned())
}

/// The traits of a one-line `#[derive(…)]`.
fn derive_list(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix("#[derive(")?.strip_suffix(")]")?;
    Some(inner.split(',').map(str::trim).filter(|d| !d.is_empty()).collect())
}

/// An impl of `derive` for `name` that reads no field.
fn blind_impl(derive: &str, name: &str) -> String {
    match derive {
        "PartialEq" => format!("impl PartialEq for {name} {{ fn eq(&self, _: &Self) -> bool {{ false }} }}\n"),
        "Eq" => format!("impl Eq for {name} {{}}\n"),
        "Hash" => {
            format!("impl std::hash::Hash for {name} {{ fn hash<H: std::hash::Hasher>(&self, _: &mut H) {{}} }}\n")
        }
        "PartialOrd" => format!(
            "impl PartialOrd for {name} {{ fn partial_cmp(&self, _: &Self) -> Option<std::cmp::Ordering> {{ None }} }}\n"
        ),
        _ => format!(
            "impl Ord for {name} {{ fn cmp(&self, _: &Self) -> std::cmp::Ordering {{ std::cmp::Ordering::Equal }} }}\n"
        ),
    }
}

/// Where the copy and its build go: under the test's own scratch directory in `target/`.
pub fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("field-reads")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_struct_loses_its_reading_derives_and_public_fields() {
        let source =
            "#[derive(Debug, Clone, PartialEq, Eq)]\npub struct A {\n    pub x: u32,\n    pub(crate) y: u32,\n}\n";
        let rewritten = rewrite_model(source);
        assert!(
            rewritten
                .contains("#[derive(Debug, Clone)]\npub struct A {\n    pub(crate) x: u32,\n    pub(crate) y: u32,\n}")
        );
        assert!(rewritten.contains("impl PartialEq for A { fn eq(&self, _: &Self) -> bool { false } }"));
        assert!(rewritten.contains("impl Eq for A {}"));
    }
}
