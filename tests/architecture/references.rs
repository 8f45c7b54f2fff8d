//! The crate's files, the module each one is, and every path in them that names an item of
//! the crate, resolved to an absolute module path: `crate::a::b`, grouped `use` lists
//! (`use crate::{a, b::{c, d}}`), `super::` and `self::` paths (against the module they are
//! written in, inline `mod tests { … }` and `#[path]` modules included), and paths through a
//! name the file imported or a child module it declared (`stats::EndpointStats` after
//! `use super::stats` or `mod stats`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::tokens::{Kind, Token, tokenize};

/// One path to an item of the crate.
#[derive(Debug, Clone)]
pub struct Reference {
    /// From the crate's root, without `crate`: `["lb", "stats", "EndpointStats"]`.
    pub target: Vec<String>,
    pub line: usize,
    /// Written in a `use` with a visibility (`pub use`, `pub(crate) use`) at the top of
    /// the file's module: a re-export, which names the item for others rather than using it.
    pub reexport: bool,
}

pub struct SourceFile {
    /// Relative to the package's root, for messages.
    pub path: PathBuf,
    /// The module the file is: `src/lb/cswrr/tests.rs` is `["lb", "cswrr", "tests"]`,
    /// `src/lb/mod.rs` is `["lb"]`.
    pub module: Vec<String>,
    pub references: Vec<Reference>,
    /// What the file's own `use` items bring into its module's scope, by name: the absolute
    /// path, or `None` for an item of another crate. A child's `super::Name` resolves
    /// through its parent's.
    pub imports: BTreeMap<String, Option<Vec<String>>>,
}

/// Every `.rs` file of the library under `src/` (`main.rs`, another crate, left out).
pub fn load_crate(package: &Path) -> Vec<SourceFile> {
    let src = package.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let tokens: Vec<(PathBuf, Vec<Token>)> = paths
        .into_iter()
        .filter(|path| path != &src.join("main.rs"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, tokenize(&text))
        })
        .collect();
    let mut modules: BTreeMap<PathBuf, Vec<String>> =
        tokens.iter().map(|(path, _)| (path.clone(), module_of_file(&src, path))).collect();
    // `#[path = "cache_tests.rs"] mod tests;` in src/tls/cache.rs makes src/tls/cache_tests.rs
    // the module tls::cache::tests.
    for (path, tokens) in &tokens {
        let declaring = modules[path].clone();
        for (file, name) in path_attributes(tokens) {
            let dir = path.parent().unwrap_or(&src);
            let mut module = declaring.clone();
            module.push(name);
            modules.insert(dir.join(file), module);
        }
    }
    tokens
        .into_iter()
        .map(|(path, tokens)| {
            let module = modules[&path].clone();
            let path = path.strip_prefix(package).unwrap_or(&path).to_path_buf();
            SourceFile::new(path, module, &tokens)
        })
        .collect()
}

impl SourceFile {
    /// The file at `path` (for messages), which is `module`, read from its `tokens`.
    pub fn new(path: PathBuf, module: Vec<String>, tokens: &[Token]) -> Self {
        let (references, imports) = references(&module, tokens);
        Self { path, module, references, imports }
    }
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of_file(src: &Path, path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src).unwrap_or(path).with_extension("");
    let mut module: Vec<String> = relative.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

/// `#[path = "file.rs"]` followed (after other attributes) by `mod name`: (file, name).
fn path_attributes(tokens: &[Token]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (i, window) in tokens.windows(5).enumerate() {
        let attribute = window[0].is("#") && window[1].is("[") && window[2].is("path") && window[3].is("=");
        if !attribute || window[4].kind != Kind::Str {
            continue;
        }
        let declaration = tokens[i + 5..].windows(2).find(|pair| pair[0].is("mod") && pair[1].is_ident());
        if let Some(pair) = declaration {
            found.push((window[4].text.clone(), pair[1].text.clone()));
        }
    }
    found
}

/// A path as written, before it is resolved.
struct Written {
    segments: Vec<String>,
    /// The module it is written in (the file's, or an inline module's inside it).
    module: Vec<String>,
    line: usize,
    /// In a `use` item: the name it brings into scope.
    imported_as: Option<String>,
    /// In a `use` item with a visibility.
    public_use: bool,
}

fn references(file_module: &[String], tokens: &[Token]) -> (Vec<Reference>, BTreeMap<String, Option<Vec<String>>>) {
    let written = written_paths(file_module, tokens);
    // Names a file brings into scope: its child modules (`mod stats;`) and its imports.
    let mut names: BTreeMap<String, Option<Vec<String>>> = declared_modules(file_module, tokens);
    let mut imports = BTreeMap::new();
    for path in written.iter().filter(|p| p.imported_as.is_some()) {
        let resolved = resolve(&path.segments, &path.module, &names);
        if let Some(name) = &path.imported_as {
            if path.module == file_module {
                imports.insert(name.clone(), resolved.clone());
            }
            names.insert(name.clone(), resolved);
        }
    }
    let references = written
        .iter()
        .filter_map(|path| {
            let target = resolve(&path.segments, &path.module, &names)?;
            let reexport = path.public_use && path.module == file_module;
            Some(Reference { target, line: path.line, reexport })
        })
        .collect();
    (references, imports)
}

fn declared_modules(file_module: &[String], tokens: &[Token]) -> BTreeMap<String, Option<Vec<String>>> {
    tokens
        .windows(2)
        .filter(|pair| pair[0].is("mod") && pair[1].is_ident())
        .map(|pair| {
            let mut module = file_module.to_vec();
            module.push(pair[1].text.clone());
            (pair[1].text.clone(), Some(module))
        })
        .collect()
}

/// An absolute path, or `None` for a path into another crate (or one this scan cannot tell).
fn resolve(
    segments: &[String],
    module: &[String],
    names: &BTreeMap<String, Option<Vec<String>>>,
) -> Option<Vec<String>> {
    let first = segments.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (module.to_vec(), &segments[1..]),
        "super" => {
            let supers = segments.iter().take_while(|s| *s == "super").count();
            let kept = module.len().checked_sub(supers)?;
            (module[..kept].to_vec(), &segments[supers..])
        }
        name => (names.get(name)?.clone()?, &segments[1..]),
    };
    // `use a::{self, …}` names `a`; a glob names what it is in.
    base.extend(rest.iter().filter(|s| *s != "self" && *s != "*").cloned());
    Some(base)
}

fn written_paths(file_module: &[String], tokens: &[Token]) -> Vec<Written> {
    let mut written = Vec::new();
    // Inline modules open at brace depths: (name, depth inside its braces).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        if token.is("{") {
            depth += 1;
            if i >= 2 && tokens[i - 2].is("mod") && tokens[i - 1].is_ident() {
                inline.push((tokens[i - 1].text.clone(), depth));
            }
        } else if token.is("}") {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        }
        let mut module = file_module.to_vec();
        module.extend(inline.iter().map(|(name, _)| name.clone()));
        let after_use = i >= 1 && tokens[i - 1].is("use");
        if after_use {
            let public_use = i >= 2 && (tokens[i - 2].is("pub") || tokens[i - 2].is(")"));
            let mut leaves = Vec::new();
            let next = use_tree(tokens, i, Vec::new(), &mut leaves);
            for (segments, alias, line) in leaves {
                let imported_as = alias.or_else(|| segments.iter().rev().find(|s| *s != "self").cloned());
                let imported_as = imported_as.filter(|name| name != "*");
                written.push(Written { segments, module: module.clone(), line, imported_as, public_use });
            }
            i = next.max(i + 1);
            continue;
        }
        let starts_path =
            token.is_ident() && tokens.get(i + 1).is_some_and(|t| t.is("::")) && !(i >= 1 && tokens[i - 1].is("::"));
        if starts_path {
            let mut segments = vec![token.text.clone()];
            let mut k = i + 1;
            while k + 1 < tokens.len() && tokens[k].is("::") && tokens[k + 1].is_ident() {
                segments.push(tokens[k + 1].text.clone());
                k += 2;
            }
            written.push(Written { segments, module, line: token.line, imported_as: None, public_use: false });
            i = k;
            continue;
        }
        i += 1;
    }
    written
}

/// A `use` tree from `tokens[i]`: each leaf's full path, its `as` name, its line. Returns the
/// index after the tree.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    mut prefix: Vec<String>,
    leaves: &mut Vec<(Vec<String>, Option<String>, usize)>,
) -> usize {
    loop {
        let Some(token) = tokens.get(i) else { return i };
        if token.is("{") {
            i += 1;
            while let Some(token) = tokens.get(i) {
                if token.is("}") {
                    break;
                }
                i = use_tree(tokens, i, prefix.clone(), leaves);
                if tokens.get(i).is_some_and(|t| t.is(",")) {
                    i += 1;
                } else if !tokens.get(i).is_some_and(|t| t.is("}")) {
                    // Not a use tree after all: stop rather than read past it.
                    return i;
                }
            }
            return i + 1;
        }
        if token.is("*") {
            prefix.push("*".into());
            leaves.push((prefix, None, token.line));
            return i + 1;
        }
        if !token.is_ident() {
            return i;
        }
        prefix.push(token.text.clone());
        if tokens.get(i + 1).is_some_and(|t| t.is("::")) {
            i += 2;
            continue;
        }
        let (alias, next) = if tokens.get(i + 1).is_some_and(|t| t.is("as")) {
            (tokens.get(i + 2).map(|t| t.text.clone()), i + 3)
        } else {
            (None, i + 1)
        };
        leaves.push((prefix, alias, token.line));
        return next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(module: &[&str], source: &str) -> Vec<(String, bool)> {
        let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        let (references, _) = references(&module, &tokenize(source));
        references.into_iter().map(|r| (r.target.join("::"), r.reexport)).collect()
    }

    #[test]
    fn grouped_uses_are_read_leaf_by_leaf() {
        let found = targets(&["proxy", "hcm"], "use crate::{lb::{self, stats::EndpointStats}, core as c};");
        assert_eq!(found, [("lb".into(), false), ("lb::stats::EndpointStats".into(), false), ("core".into(), false)]);
    }

    #[test]
    fn super_resolves_against_the_module_it_is_written_in() {
        let source = "use super::host::Host;\nmod tests { use super::*; fn f() { super::super::x::y(); } }";
        let found = targets(&["lb", "stats"], source);
        assert_eq!(found, [("lb::host::Host".into(), false), ("lb::stats".into(), false), ("lb::x::y".into(), false)]);
    }

    #[test]
    fn paths_through_imported_names_and_child_modules_resolve() {
        let source = "mod weights;\nuse super::stats;\npub use weights::W;\nfn f() { stats::bump(); Vec::new(); }";
        let found = targets(&["lb", "cswrr"], source);
        assert_eq!(
            found,
            [("lb::stats".into(), false), ("lb::cswrr::weights::W".into(), true), ("lb::stats::bump".into(), false)]
        );
    }
}
