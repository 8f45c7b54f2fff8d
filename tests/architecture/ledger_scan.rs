//! The protobuf messages the converters destructure: every `Name { a, b: _, c }` in
//! `src/config/convert/**` whose name and field set are exactly those of a message in the
//! descriptor pool (prost's Rust fields: one per field, one per real `oneof`). A converter
//! that starts reading a new message thereby adds it to the ledger's roots, so its fields
//! cannot go unclassified.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost_reflect::{DescriptorPool, MessageDescriptor};

use crate::tokens::{Kind, Token, tokenize};

/// One destructuring (or construction) of a protobuf message in a converter.
#[derive(Debug, Clone)]
pub struct Destructured {
    /// The message's full name, `envoy.config.cluster.v3.Cluster`.
    pub message: String,
    pub file: PathBuf,
    pub line: usize,
    /// Rust fields bound to `_` (or bound and then dropped with `let _ = field;`): taken
    /// apart and never looked at.
    pub discarded: BTreeSet<String>,
    /// The pattern ends in `..`: fields left unnamed.
    pub rest: bool,
}

/// Rust field names of a message, as prost generates them.
pub fn rust_fields(message: &MessageDescriptor) -> BTreeSet<String> {
    let mut fields = BTreeSet::new();
    for field in message.fields() {
        match field.containing_oneof().filter(|oneof| !oneof.is_synthetic()) {
            Some(oneof) => fields.insert(snake(oneof.name())),
            None => fields.insert(snake(field.name())),
        };
    }
    fields
}

/// prost's field names are the proto names in snake case (Envoy's are already).
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A type name compared the way prost renames messages (`HTTPFault` → `HttpFault`).
fn folded(name: &str) -> String {
    name.chars().filter(|c| *c != '_').map(|c| c.to_ascii_lowercase()).collect()
}

/// The messages a converter names as the type it reads (`pub const TYPE: &str = "…";`):
/// configs read from JSON by field name (Istio's), which no pattern takes apart.
pub fn named_types(pool: &DescriptorPool, dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = without_test_modules(tokenize(&text));
        for window in tokens.windows(7) {
            let shape = ["const", "TYPE", ":", "&", "str", "="].iter().zip(window).all(|(text, t)| t.is(text));
            if shape && window[6].kind == Kind::Str && pool.get_message_by_name(&window[6].text).is_some() {
                found.push((window[6].text.clone(), file.clone()));
            }
        }
    }
    found
}

/// The messages a converter unpacks by type and reads field by field, without a pattern:
/// `unpack::<Type>(…)` and `let name: Type = …unpack(…)`, the type matched by its name.
pub fn unpacked_types(pool: &DescriptorPool, dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let inside = file.strip_prefix(dir).unwrap_or(&file);
        if inside.components().any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = without_test_modules(tokenize(&text));
        for (i, token) in tokens.iter().enumerate() {
            if !token.is("unpack") {
                continue;
            }
            // `unpack::<a::b::Type>`: the last name before `>`.
            let turbofish =
                tokens.get(i + 1).is_some_and(|t| t.is("::")) && tokens.get(i + 2).is_some_and(|t| t.is("<"));
            let name = if turbofish {
                tokens[i + 3..].iter().take_while(|t| !t.is(">")).filter(|t| t.is_ident()).last()
            } else {
                // `let name: a::Type = …unpack(`: the statement's `let`, then its type.
                let start = tokens[..i].iter().rposition(|t| t.is(";") || t.is("{") || t.is("}")).map_or(0, |p| p + 1);
                let statement = &tokens[start..i];
                let annotated =
                    statement.first().is_some_and(|t| t.is("let")) && statement.get(2).is_some_and(|t| t.is(":"));
                if annotated {
                    statement[3..].iter().take_while(|t| !t.is("=")).filter(|t| t.is_ident()).last()
                } else {
                    None
                }
            };
            let Some(name) = name else { continue };
            // Only a name one message has: `RateLimit` or `FilterConfig` could be any of
            // several (those converters take their message apart, so the scan above has it).
            let candidates: Vec<_> =
                pool.all_messages().filter(|m| !m.is_map_entry() && folded(m.name()) == folded(&name.text)).collect();
            if let [message] = &candidates[..] {
                found.push((message.full_name().to_owned(), file.clone()));
            }
        }
    }
    found
}

/// Every message destructured in the `.rs` files under `dir`, tests left out.
pub fn destructured(pool: &DescriptorPool, dir: &Path) -> Vec<Destructured> {
    let mut by_name: BTreeMap<String, Vec<(MessageDescriptor, BTreeSet<String>)>> = BTreeMap::new();
    for message in pool.all_messages() {
        if message.is_map_entry() {
            continue;
        }
        let fields = rust_fields(&message);
        by_name.entry(folded(message.name())).or_default().push((message, fields));
    }
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let inside = file.strip_prefix(dir).unwrap_or(&file);
        if inside.components().any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = without_test_modules(tokenize(&text));
        // `let _ = field;` drops a binding as surely as `field: _` does.
        let dropped: BTreeSet<String> = tokens
            .windows(5)
            .filter(|w| w[0].is("let") && w[1].is("_") && w[2].is("=") && w[3].is_ident() && w[4].is(";"))
            .map(|w| w[3].text.clone())
            .collect();
        for mut pattern in patterns(&tokens) {
            for (field, discarded) in pattern.fields.iter_mut() {
                *discarded |= dropped.contains(field);
            }
            let Some(candidates) = by_name.get(&folded(&pattern.name)) else { continue };
            let named: BTreeSet<String> = pattern.fields.keys().cloned().collect();
            for (message, fields) in candidates {
                let matches =
                    if pattern.rest { named.is_subset(fields) && !named.is_empty() } else { &named == fields };
                if matches {
                    found.push(Destructured {
                        message: message.full_name().to_owned(),
                        file: file.clone(),
                        line: pattern.line,
                        discarded: pattern.fields.iter().filter(|(_, d)| **d).map(|(f, _)| f.clone()).collect(),
                        rest: pattern.rest,
                    });
                }
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The tokens without any `#[cfg(test)] mod … { … }`: a test's literal is no conversion.
fn without_test_modules(tokens: Vec<Token>) -> Vec<Token> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let cfg_test = ["#", "[", "cfg", "(", "test", ")", "]", "mod"]
            .iter()
            .enumerate()
            .all(|(k, text)| tokens.get(i + k).is_some_and(|t| t.is(text)));
        if cfg_test && tokens.get(i + 9).is_some_and(|t| t.is("{")) {
            i = closing(&tokens, i + 9) + 1;
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

/// The index of the bracket that closes the one at `open`.
fn closing(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.kind != Kind::Punct {
            continue;
        }
        match token.text.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    tokens.len() - 1
}

struct Pattern {
    name: String,
    line: usize,
    /// Field → bound to `_`.
    fields: BTreeMap<String, bool>,
    rest: bool,
}

/// Every `Name { field, field: pattern, .. }` shape in the tokens.
fn patterns(tokens: &[Token]) -> Vec<Pattern> {
    let mut out = Vec::new();
    for i in 0..tokens.len().saturating_sub(1) {
        let (name, open) = (&tokens[i], &tokens[i + 1]);
        if !name.is_ident() || !open.is("{") || !name.text.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let end = closing(tokens, i + 1);
        let mut fields = BTreeMap::new();
        let mut rest = false;
        let mut shape = true;
        let mut k = i + 2;
        while k < end && shape {
            // One entry: `ident`, `ident: …` up to the next comma at this depth, or `..`.
            if tokens[k].is(".") && tokens.get(k + 1).is_some_and(|t| t.is(".")) {
                rest = true;
                k += 2;
            } else if tokens[k].is_ident() {
                let field = tokens[k].text.clone();
                let next = &tokens[k + 1];
                if next.is(",") || k + 1 == end {
                    fields.insert(field, false);
                    k += 1;
                } else if next.is(":") {
                    let mut j = k + 2;
                    let discarded = tokens[j].is("_") && (tokens[j + 1].is(",") || j + 1 == end);
                    while j < end && !tokens[j].is(",") {
                        if tokens[j].kind == Kind::Punct && matches!(tokens[j].text.as_str(), "{" | "(" | "[") {
                            j = closing(tokens, j);
                        }
                        j += 1;
                    }
                    fields.insert(field, discarded);
                    k = j;
                } else {
                    shape = false;
                }
            } else {
                shape = false;
            }
            if k < end {
                if tokens[k].is(",") {
                    k += 1;
                } else {
                    shape = false;
                }
            }
        }
        if shape && (!fields.is_empty() || rest) {
            out.push(Pattern { name: name.text.clone(), line: name.line, fields, rest });
        }
    }
    out
}
