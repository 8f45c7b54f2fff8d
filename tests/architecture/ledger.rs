//! The field ledger (`docs/field-ledger.tsv`, shown as `docs/field-ledger.md`): every field
//! of every message Outrider accepts is honoured, refused when set, or has no effect on what
//! a request gets, with the reason. These tests fail when the protos (an `envoy-types`
//! upgrade) or the converters (a newly read message) have a field the ledger does not
//! classify, when the ledger names a field that no longer exists or is no longer reached,
//! when a converter discards a field the ledger calls honoured, and when the document is
//! stale (`OUTRIDER_REGENERATE=1` rewrites it).

use std::collections::BTreeSet;
use std::sync::Arc;

use prost_reflect::DescriptorPool;

use crate::ledger_data::{self, Class, Ledger};
use crate::ledger_scan::{self, Destructured};
use crate::ledger_walk::{self, Walk};
use crate::package;

fn ledger() -> Ledger {
    let path = package().join("docs/field-ledger.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ledger_data::parse(&text).unwrap_or_else(|errors| panic!("{}:\n{}", path.display(), errors.join("\n")))
}

fn pool() -> Arc<DescriptorPool> {
    outrider::pb::json::pool().unwrap_or_else(|e| panic!("descriptor pool: {e}"))
}

fn destructured(pool: &DescriptorPool) -> Vec<Destructured> {
    ledger_scan::destructured(pool, &package().join("src/config/convert"))
}

fn walk(pool: &DescriptorPool, ledger: &Ledger, destructured: &[Destructured]) -> Walk {
    // Converters first, so that a message's "reached from" names the code that reads it.
    let mut roots: Vec<(String, String)> = destructured
        .iter()
        .map(|d| {
            let file = d.file.strip_prefix(package()).unwrap_or(&d.file);
            (d.message.clone(), format!("converted in {}", file.display()))
        })
        .collect();
    let convert = package().join("src/config/convert");
    let by_type =
        ledger_scan::named_types(pool, &convert).into_iter().chain(ledger_scan::unpacked_types(pool, &convert));
    for (message, file) in by_type {
        let file = file.strip_prefix(package()).unwrap_or(&file).display().to_string();
        roots.push((message, format!("read in {file}")));
    }
    roots.extend(ledger_walk::RESOURCES.iter().map(|name| (name.to_string(), "a resource type".to_owned())));
    ledger_walk::walk(pool, &roots, ledger)
}

#[test]
fn the_field_ledger_classifies_every_field_outrider_accepts() {
    let (pool, ledger) = (pool(), ledger());
    let destructured = destructured(&pool);
    let walk = walk(&pool, &ledger, &destructured);
    let missing: Vec<String> =
        walk.missing.iter().map(|m| format!("{}\t{}\t?\t({})", m.message, m.field, m.via)).collect();
    assert!(
        missing.is_empty(),
        "{} fields are not in docs/field-ledger.tsv; classify each (honoured, refused, no effect):\n{}",
        missing.len(),
        missing.join("\n")
    );
    let mut stale = Vec::new();
    for (message, rows) in &ledger {
        let Some((descriptor, _)) = walk.reached.get(message) else {
            let line = rows.values().map(|e| e.line).min().unwrap_or(0);
            stale.push(format!("line {line}: {message} is not a message Outrider reads (or no longer exists)"));
            continue;
        };
        let fields: BTreeSet<String> = descriptor.fields().map(|f| f.name().to_owned()).collect();
        for (field, entry) in rows {
            if !fields.contains(field) {
                stale.push(format!("line {}: {message} has no field {field}", entry.line));
            }
        }
    }
    assert!(stale.is_empty(), "docs/field-ledger.tsv names what the protos do not have:\n{}", stale.join("\n"));
}

/// A field a converter binds to `_` is never looked at there: it has no effect, or, when
/// another converter of the same message honours or refuses it, the reason says why it may
/// be dropped there and names that file (`… (not read by hcm_tracing: …)`).
#[test]
fn a_field_a_converter_discards_has_no_effect_there() {
    let (pool, ledger) = (pool(), ledger());
    let mut wrong = Vec::new();
    for d in destructured(&pool) {
        let Some(message) = pool.get_message_by_name(&d.message) else { continue };
        for field in message.fields() {
            let rust = match field.containing_oneof().filter(|o| !o.is_synthetic()) {
                Some(oneof) => oneof.name().to_owned(),
                None => field.name().to_owned(),
            };
            let Some(entry) = ledger.get(&d.message).and_then(|rows| rows.get(field.name())) else { continue };
            let stem = d.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            if entry.class != Class::NoEffect && d.discarded.contains(&rust) && !entry.reason.contains(&stem) {
                wrong.push(format!(
                    "{}:{}: {}.{} is dropped there (`_`)",
                    d.file.display(),
                    d.line,
                    d.message,
                    field.name()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "discarded by a converter, yet said to act in docs/field-ledger.tsv:\n{}",
        wrong.join("\n")
    );
}

/// Converters name every field (`let proto::X { a, b: _, c } = x;`), so that a field added by
/// a proto upgrade stops the build until someone decides what it means.
#[test]
fn converters_take_every_message_apart_whole() {
    let pool = pool();
    let partial: Vec<String> = destructured(&pool)
        .into_iter()
        .filter(|d| d.rest)
        .map(|d| format!("{}:{}: {} {{ .. }}", d.file.display(), d.line, d.message))
        .collect();
    assert!(partial.is_empty(), "converters that leave fields unnamed:\n{}", partial.join("\n"));
}

#[test]
fn the_field_ledger_document_is_current() {
    let (pool, ledger) = (pool(), ledger());
    let destructured = destructured(&pool);
    let walk = walk(&pool, &ledger, &destructured);
    let path = package().join("docs/field-ledger.md");
    let rendered = crate::ledger_doc::render(&ledger, &walk);
    if std::env::var_os("OUTRIDER_REGENERATE").is_some() {
        std::fs::write(&path, &rendered).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == rendered,
        "docs/field-ledger.md is stale: OUTRIDER_REGENERATE=1 cargo nextest run --test architecture ledger"
    );
}
