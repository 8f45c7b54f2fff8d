//! `docs/field-ledger.tsv`: one line per field, `message<TAB>field<TAB>class<TAB>reason`,
//! written by hand (lines starting with `#` are comments). The class says what a request
//! gets from the field; the reason says why a field has no effect, what is refused, or, for
//! an honoured field, anything a reader should know.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Converted into the configuration model and acted on.
    Honoured,
    /// A resource that sets it (or sets it to what Outrider does not do) is refused, with the
    /// field's path in the NACK.
    Refused,
    /// Accepted and not acted on, because it changes nothing a request gets (stats names,
    /// control-plane bookkeeping, a choice Outrider makes one fixed way...).
    NoEffect,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Honoured, Class::Refused, Class::NoEffect];

    fn parse(text: &str) -> Option<Class> {
        Self::ALL.into_iter().find(|class| class.to_string() == text)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Honoured => "honoured",
            Class::Refused => "refused",
            Class::NoEffect => "no effect",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub class: Class,
    pub reason: String,
    /// 1-based, for messages.
    pub line: usize,
}

/// message full name → field name → entry.
pub type Ledger = BTreeMap<String, BTreeMap<String, Entry>>;

/// Parses the ledger; every malformed or repeated line is an error naming its line.
pub fn parse(text: &str) -> Result<Ledger, Vec<String>> {
    let mut ledger = Ledger::new();
    let mut errors = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() || raw.starts_with('#') {
            continue;
        }
        let columns: Vec<&str> = raw.split('\t').collect();
        let [message, field, class, reason] = columns[..] else {
            errors.push(format!("line {line}: expected 4 tab-separated columns, found {}", columns.len()));
            continue;
        };
        let Some(class) = Class::parse(class) else {
            errors.push(format!("line {line}: class {class:?} is none of honoured, refused, no effect"));
            continue;
        };
        if class != Class::Honoured && reason.trim().is_empty() {
            errors.push(format!("line {line}: {message}.{field} is {class} without a reason"));
        }
        let entry = Entry { class, reason: reason.trim().to_owned(), line };
        if ledger.entry(message.to_owned()).or_default().insert(field.to_owned(), entry).is_some() {
            errors.push(format!("line {line}: {message}.{field} is listed twice"));
        }
    }
    if errors.is_empty() { Ok(ledger) } else { Err(errors) }
}
