//! `docs/field-ledger.md`, written from the ledger and the messages the walk reached: the
//! totals, one row of counts per message, then every field with its class and reason.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::ledger_data::{Class, Ledger};
use crate::ledger_walk::Walk;

pub fn render(ledger: &Ledger, walk: &Walk) -> String {
    let mut counts: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut totals = [0usize; 3];
    for (name, (message, _)) in &walk.reached {
        let row = counts.entry(name).or_default();
        for field in message.fields() {
            if let Some(entry) = ledger.get(name).and_then(|rows| rows.get(field.name())) {
                let slot = Class::ALL.iter().position(|c| *c == entry.class).unwrap_or(0);
                row[slot] += 1;
                totals[slot] += 1;
            }
        }
    }
    let fields: usize = totals.iter().sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# The field ledger\n\n\
         <!-- Generated from docs/field-ledger.tsv by tests/architecture/ledger.rs; do not edit.\n     \
         OUTRIDER_REGENERATE=1 cargo nextest run --test architecture ledger -->\n\n\
         Every field of every message Outrider accepts from a bootstrap or a control plane is one of:\n\n\
         - **honoured**: converted into the configuration model and acted on;\n\
         - **refused**: a resource that sets it (or sets it to something Outrider does not do) is\n  \
         refused, and the NACK names the field's path;\n\
         - **no effect**: accepted, and changes nothing a request gets, for the reason given.\n\n\
         The messages are the bootstrap, the five xDS resource types, every message a converter\n\
         in `src/config/convert` reads (each filter's and extension's config), and every message\n\
         an honoured field holds. A field of a message held only by a refused field, or one with no\n\
         effect, is not listed: nothing of it is read. `google.protobuf` types are values.\n\
         A field whose message is shared is classified once for every place it appears.\n\n\
         `tests/architecture/ledger.rs` fails when the protos have a field the ledger does not\n\
         classify, when the ledger names a field they no longer have, and when this file is stale.\n"
    );
    let _ = writeln!(
        out,
        "**{fields} fields in {} messages: {} honoured, {} refused, {} with no effect.**\n",
        walk.reached.len(),
        totals[0],
        totals[1],
        totals[2]
    );
    // Fields not yet as Envoy has them: accepted and not acted on where Envoy acts ("Gap"),
    // or converted and not yet read while a fix is under way ("being fixed").
    let mut gaps = Vec::new();
    for (name, (message, _)) in &walk.reached {
        for field in message.fields() {
            if let Some(entry) = ledger.get(name).and_then(|rows| rows.get(field.name()))
                && (entry.reason.starts_with("Gap") || entry.reason.starts_with("being fixed"))
            {
                gaps.push(format!(
                    "| `{name}.{}` | {} | {} |",
                    field.name(),
                    entry.class,
                    entry.reason.replace('|', "\\|")
                ));
            }
        }
    }
    let _ = writeln!(
        out,
        "## Known gaps\n\n\
         {} fields are not yet what Envoy makes of them: accepted and not acted on where Envoy acts\n\
         (reason \"Gap\"; the model fields behind them are listed in `docs/field-ledger-unread.tsv`),\n\
         or converted and not yet read while the fix is under way (\"being fixed\").\n",
        gaps.len()
    );
    let _ = writeln!(out, "| Field | Class | Reason |");
    let _ = writeln!(out, "|---|---|---|");
    for gap in &gaps {
        let _ = writeln!(out, "{gap}");
    }
    let _ = writeln!(out, "\n## Counts per message\n");
    let _ = writeln!(out, "| Message | Honoured | Refused | No effect |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (name, [honoured, refused, none]) in &counts {
        let _ = writeln!(out, "| [`{name}`](#{}) | {honoured} | {refused} | {none} |", anchor(name));
    }
    let _ = writeln!(out, "\n## Fields\n");
    for (name, (message, via)) in &walk.reached {
        let _ = writeln!(out, "### {name}\n\nReached from: {via}\n");
        let _ = writeln!(out, "| Field | Class | Reason |");
        let _ = writeln!(out, "|---|---|---|");
        for field in message.fields() {
            if let Some(entry) = ledger.get(name).and_then(|rows| rows.get(field.name())) {
                let reason = entry.reason.replace('|', "\\|");
                let _ = writeln!(out, "| `{}` | {} | {reason} |", field.name(), entry.class);
            }
        }
        let _ = writeln!(out);
    }
    out
}

/// The anchor a Markdown renderer gives the heading `### name`.
fn anchor(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}
