//! The "## Modules" table of `docs/architecture.md`, read as the rules: its "may use" column
//! is `nothing`, `everything`, or backticked module names separated by commas, where
//! "`pb` in `convert`" allows `pb` only inside the module's `convert` child. Anything else
//! there fails the test, so that the document stays the one place the rules are written.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MayUse {
    Everything,
    /// Module → the child it is restricted to (`None`: anywhere in the module).
    Only(BTreeMap<String, Option<String>>),
}

impl MayUse {
    /// Whether a file in `module` (its module path, the top-level module first) may use
    /// `target`.
    pub fn allows(&self, module: &[String], target: &str) -> bool {
        match self {
            MayUse::Everything => true,
            MayUse::Only(allowed) => match allowed.get(target) {
                Some(None) => true,
                Some(Some(child)) => module.get(1) == Some(child),
                None => false,
            },
        }
    }
}

/// Module → what it may use, from the document's text.
pub fn parse(document: &str) -> BTreeMap<String, MayUse> {
    let mut lines = document.lines().skip_while(|line| line.trim() != "## Modules");
    assert!(lines.next().is_some(), "docs/architecture.md has no \"## Modules\" section");
    let mut table = lines.skip_while(|line| !line.starts_with('|')).take_while(|line| line.starts_with('|'));
    let header = table.next().unwrap_or_else(|| panic!("the \"## Modules\" section has no table"));
    assert_eq!(cells(header), ["module", "owns", "may use"], "the modules table's columns changed: {header}");
    let separator = table.next().unwrap_or_default();
    assert!(
        cells(separator).iter().all(|cell| !cell.is_empty() && cell.chars().all(|c| c == '-' || c == ':')),
        "the modules table's second line is not a separator: {separator}"
    );
    let mut rules = BTreeMap::new();
    for row in table {
        let cells = cells(row);
        assert_eq!(cells.len(), 3, "a modules table row without three cells: {row}");
        let may_use = may_use(&cells[2]).unwrap_or_else(|why| panic!("{why} in the \"may use\" cell of: {row}"));
        let modules = names(&cells[0]).unwrap_or_else(|why| panic!("{why} in the \"module\" cell of: {row}"));
        assert!(!modules.is_empty(), "a modules table row names no module: {row}");
        for module in modules {
            assert!(rules.insert(module.clone(), may_use.clone()).is_none(), "`{module}` has two rows");
        }
    }
    assert!(!rules.is_empty(), "the modules table has no rows");
    for (module, may_use) in &rules {
        if let MayUse::Only(allowed) = may_use {
            for target in allowed.keys() {
                assert!(rules.contains_key(target), "`{module}` may use `{target}`, which has no row");
            }
        }
    }
    rules
}

fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|cell| cell.trim().to_string()).collect()
}

/// Backticked names separated by commas: "`capture`, `inject`".
fn names(cell: &str) -> Result<Vec<String>, String> {
    cell.split(',').map(|item| name(item.trim())).collect()
}

fn name(item: &str) -> Result<String, String> {
    let inner = item
        .strip_prefix('`')
        .and_then(|rest| rest.strip_suffix('`'))
        .ok_or_else(|| format!("\"{item}\" is not a backticked name"))?;
    let well_formed =
        !inner.is_empty() && inner.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if well_formed { Ok(inner.to_string()) } else { Err(format!("\"{item}\" is not a module name")) }
}

fn may_use(cell: &str) -> Result<MayUse, String> {
    match cell {
        "everything" => return Ok(MayUse::Everything),
        "nothing" => return Ok(MayUse::Only(BTreeMap::new())),
        _ => {}
    }
    let mut allowed = BTreeMap::new();
    for item in cell.split(',').map(str::trim) {
        let (target, child) = match item.split_once(" in ") {
            Some((target, child)) => (name(target.trim())?, Some(name(child.trim())?)),
            None => (name(item)?, None),
        };
        if allowed.insert(target.clone(), child).is_some() {
            return Err(format!("`{target}` twice"));
        }
    }
    Ok(MayUse::Only(allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENT: &str = "# A\n\n## Modules\n\n| module | owns | may use |\n|---|---|---|\n\
        | `core` | primitives | nothing |\n| `pb` | protos | nothing |\n\
        | `config` | the model | `core`, `pb` in `convert` |\n| `a`, `b` | two | `core` |\n\
        | `app` | start-up | everything |\n\nprose\n";

    #[test]
    fn reads_every_form_of_the_may_use_column() {
        let rules = parse(DOCUMENT);
        let module = |path: &str| path.split("::").map(String::from).collect::<Vec<_>>();
        assert!(rules["config"].allows(&module("config::convert::cluster"), "pb"));
        assert!(!rules["config"].allows(&module("config::bootstrap"), "pb"));
        assert!(rules["config"].allows(&module("config::bootstrap"), "core"));
        assert!(!rules["core"].allows(&module("core"), "pb"));
        assert!(rules["b"].allows(&module("b::x"), "core"));
        assert!(rules["app"].allows(&module("app"), "anything"));
    }

    #[test]
    #[should_panic(expected = "is not a backticked name")]
    fn a_cell_in_prose_is_refused() {
        parse(&DOCUMENT.replace("`core`, `pb` in `convert`", "core (protos only inside convert)"));
    }

    #[test]
    #[should_panic(expected = "no \"## Modules\" section")]
    fn a_missing_table_is_refused() {
        parse("# A\n");
    }

    #[test]
    #[should_panic(expected = "which has no row")]
    fn a_module_without_a_row_is_refused() {
        parse(&DOCUMENT.replace("| `core` | primitives | nothing |\n", ""));
    }
}
