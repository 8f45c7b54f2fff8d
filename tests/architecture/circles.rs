//! The modules inside one top-level module as a graph, and its circles. A node is one child
//! of the module (`src/lb/stats.rs` with everything under `src/lb/stats/`: `lb::stats`) or the
//! module's root file itself (`src/lb/mod.rs`: `lb`); an edge A → B is a path in A's files
//! that names B or an item of B.
//!
//! The root's re-exports (`pub use stats::EndpointStats;` in `lb/mod.rs`) are its public
//! face, not a use: they are no edge, and a child's `super::EndpointStats` is an edge to the
//! child that defines `EndpointStats`, not to the root. An item the root file defines itself
//! is the root's, and so are the root's other uses of its children.

use std::collections::{BTreeMap, BTreeSet};

use crate::references::SourceFile;

/// (from, to) → where: "src/lb/stats.rs:12", one per path.
pub type Edges = BTreeMap<(String, String), Vec<String>>;

pub fn edges_inside(files: &[SourceFile], top: &str) -> Edges {
    edges_inside_module(files, &[top.to_string()])
}

/// [`edges_inside`] for the module at any depth whose path is `module`
/// (`["proxy", "filters"]`): its children and its root file.
pub fn edges_inside_module(files: &[SourceFile], module: &[String]) -> Edges {
    let depth = module.len();
    let top = module.join("::");
    let inside: Vec<&SourceFile> = files.iter().filter(|f| f.module.starts_with(module)).collect();
    let children: BTreeSet<&str> = inside.iter().filter_map(|f| f.module.get(depth)).map(String::as_str).collect();
    let root = inside.iter().find(|f| f.module.len() == depth);
    let root_imports = root.map(|f| &f.imports);
    let node = |target: &[String]| node_of(module, target, &children, root_imports, 0);
    let mut edges = Edges::new();
    for file in &inside {
        let from = match file.module.get(depth) {
            Some(child) => format!("{top}::{child}"),
            None => top.clone(),
        };
        for reference in &file.references {
            let is_root = file.module.len() == depth;
            if (is_root && reference.reexport) || !reference.target.starts_with(module) {
                continue;
            }
            let Some(to) = node(&reference.target) else { continue };
            if to != from {
                let at = format!("{}:{}", file.path.display(), reference.line);
                edges.entry((from.clone(), to)).or_default().push(at);
            }
        }
    }
    edges
}

/// The node an absolute path inside `top` names, or `None` for `top` itself (a namespace,
/// not an item) and for another module's item that the root imports.
fn node_of(
    module: &[String],
    target: &[String],
    children: &BTreeSet<&str>,
    root_imports: Option<&BTreeMap<String, Option<Vec<String>>>>,
    hops: usize,
) -> Option<String> {
    let top = module.join("::");
    let item = target.get(module.len())?;
    if children.contains(item.as_str()) {
        return Some(format!("{top}::{item}"));
    }
    match root_imports.and_then(|imports| imports.get(item)) {
        // Re-exported or imported by the root: the item is where that import points.
        Some(Some(path)) if path.starts_with(module) && hops < 8 => {
            node_of(module, path, children, root_imports, hops + 1)
        }
        Some(_) => None,
        None => Some(top),
    }
}

/// Strongly connected components with more than one node, each sorted, found by Tarjan's
/// algorithm.
pub fn circles(edges: &Edges) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
        graph.entry(to).or_default();
    }
    let mut search = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for node in graph.keys() {
        if !search.index.contains_key(node) {
            search.visit(node);
        }
    }
    search.components.into_iter().filter(|c| c.len() > 1).collect()
}

struct Tarjan<'a> {
    graph: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    components: Vec<Vec<String>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, node: &'a str) {
        let index = self.index.len();
        self.index.insert(node, index);
        self.low.insert(node, index);
        self.stack.push(node);
        for &next in &self.graph[node] {
            if !self.index.contains_key(next) {
                self.visit(next);
                let low = self.low[node].min(self.low[next]);
                self.low.insert(node, low);
            } else if self.stack.contains(&next) {
                let low = self.low[node].min(self.index[next]);
                self.low.insert(node, low);
            }
        }
        if self.low[node] == index {
            let mut component = Vec::new();
            while let Some(member) = self.stack.pop() {
                component.push(member.to_string());
                if member == node {
                    break;
                }
            }
            component.sort();
            self.components.push(component);
        }
    }
}

/// A circle as the failure lists it: its nodes, then each edge inside it with where (the
/// first few places, as one is enough to start from).
pub fn describe(circle: &[String], edges: &Edges) -> String {
    const SHOWN: usize = 4;
    let mut text = format!("circle: {}\n", circle.join(", "));
    for ((from, to), at) in edges {
        if circle.contains(from) && circle.contains(to) {
            let mut places: Vec<&str> = at.iter().map(String::as_str).collect();
            places.dedup();
            let more = places.len().saturating_sub(SHOWN);
            places.truncate(SHOWN);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            text.push_str(&format!("  {from} → {to}: {}{more}\n", places.join(", ")));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::tokenize;

    fn file(path: &str, text: &str) -> SourceFile {
        let module = path.trim_end_matches(".rs").trim_end_matches("/mod").split('/').map(String::from).collect();
        SourceFile::new(path.into(), module, &tokenize(text))
    }

    #[test]
    fn re_exports_lead_to_the_child_that_defines_the_item() {
        let files = [
            file(
                "lb/mod.rs",
                "pub mod host;\npub mod stats;\npub use host::Host;\npub use stats::Stats;\nfn root() {}",
            ),
            file("lb/host.rs", "use super::Stats;\nfn f() { super::root(); }"),
            file("lb/stats.rs", "pub struct Stats;"),
        ];
        let found: Vec<(String, String)> = edges_inside(&files, "lb").into_keys().collect();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(found, [pair("lb::host", "lb"), pair("lb::host", "lb::stats")]);
    }

    fn edges(pairs: &[(&str, &str)]) -> Edges {
        pairs.iter().map(|(a, b)| ((a.to_string(), b.to_string()), vec![format!("{a}.rs:1")])).collect()
    }

    #[test]
    fn finds_each_circle_once_and_no_chain() {
        let found =
            circles(&edges(&[("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "c"), ("e", "f")]));
        assert_eq!(found, [vec!["c", "d", "e"], vec!["a", "b"]]);
    }
}
