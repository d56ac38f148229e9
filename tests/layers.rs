//! The source tree's import graph, read from the code's own `use` lines and paths: no
//! module may import, directly or through others, a module that imports it, and the
//! layers run one way, ffi -> loader -> estimator -> engine -> plan -> store -> mpi.
//! The leaf modules beside them (error, backend, call, memory, agree, config, ...) may
//! be used by any layer they do not themselves use.
//!
//! A module's edges are the modules its paths name (`crate::a::b`, `super::x`,
//! `self::y`, a child's `x::...`), resolved to the longest module that exists. A
//! module's use of its own ancestors (`super::` from a child) is not an edge: a parent
//! and its children are one unit to the rest of the tree. Unit tests at the end of a
//! file (`#[cfg(test)] mod tests`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const LAYERS: [&str; 7] = ["ffi", "loader", "estimator", "engine", "plan", "store", "mpi"];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path ("loader::step"; "" for the crate root) -> source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap().to_string();
            found.insert(parts.join("::"), code);
        }
    }
    found
}

/// Every path the code names from `crate`, `super`, `self` or a child module, with the
/// braces of `use` lines expanded.
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    // A `use` statement, as it runs over lines until its semicolon.
    let mut statement: Option<String> = None;
    for line in code.lines().map(str::trim) {
        let unqualified = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|v| line.strip_prefix(v)).unwrap_or(line);
        let text = match (statement.as_mut(), unqualified.strip_prefix("use ")) {
            (Some(text), _) => {
                text.push(' ');
                text.push_str(line);
                text
            }
            (None, Some(tree)) => statement.insert(tree.to_string()),
            (None, None) => continue,
        };
        if let Some(end) = text.find(';') {
            // "a::{b as c, d}" -> "a::{b@c,d}": renames kept apart, spaces gone.
            let tree: String = text[..end].replace(" as ", "@").chars().filter(|c| !c.is_whitespace()).collect();
            expand(&tree, &mut paths);
            statement = None;
        }
    }
    // Paths in code outside `use` lines.
    for (at, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
        let path: String = code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        paths.push(path);
    }
    paths
}

fn expand(tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(tree.split('@').next().unwrap().to_string());
        return;
    };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap()]);
    let (mut depth, mut item) = (0, String::new());
    for c in inner.chars().chain([',']) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                if !item.is_empty() {
                    expand(&format!("{prefix}{item}"), out);
                }
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
}

/// The module a path names, from module `from`: the longest prefix that is a module.
fn resolve(all: &BTreeMap<String, String>, from: &str, path: &str) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if from.is_empty() { vec![] } else { from.split("::").collect() };
    match segments.first().copied() {
        Some("crate") => {
            base.clear();
            segments.remove(0);
        }
        Some("super" | "self") => {
            while segments.first() == Some(&"super") {
                base.pop();
                segments.remove(0);
            }
            if segments.first() == Some(&"self") {
                segments.remove(0);
            }
        }
        Some(child) if all.contains_key(&join(&base, &[child])) => {}
        _ => return None,
    }
    (0..=segments.len()).rev().map(|n| join(&base, &segments[..n])).find(|m| all.contains_key(m))
}

fn join(base: &[&str], rest: &[&str]) -> String {
    base.iter().chain(rest).copied().collect::<Vec<_>>().join("::")
}

fn graph() -> Graph {
    let all = modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut graph = Graph::new();
    for (module, code) in &all {
        let edges = graph.entry(module.clone()).or_default();
        for path in named_paths(code) {
            let Some(target) = resolve(&all, module, &path) else { continue };
            let ancestor = target.is_empty() || module.starts_with(&format!("{target}::"));
            if target != *module && !ancestor {
                edges.insert(target);
            }
        }
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, v: &'g str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for next in &w.graph[v] {
            if !w.index.contains_key(next.as_str()) {
                visit(w, next);
                w.low.insert(v, w.low[v].min(w.low[next.as_str()]));
            } else if w.stack.contains(&next.as_str()) {
                w.low.insert(v, w.low[v].min(w.index[next.as_str()]));
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().rposition(|m| *m == v).unwrap();
            let component: Vec<String> = w.stack.drain(at..).map(str::to_string).collect();
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], found: vec![] };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| module.split("::").next() == Some(l))
}

#[test]
fn no_module_imports_itself_through_others() {
    let graph = graph();
    assert!(graph.len() > 40, "the tree was read: {} modules", graph.len());
    let found = circles(&graph);
    let shown: Vec<String> = found
        .iter()
        .map(|c| c.iter().map(|m| format!("{m} -> {:?}", graph[m].intersection(&c.iter().cloned().collect()).collect::<Vec<_>>())).collect::<Vec<_>>().join("; "))
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", shown.join("\n"));
}

#[test]
fn the_layers_run_one_way() {
    let upward: Vec<String> = graph()
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(from, to)| matches!((layer(from), layer(to)), (Some(a), Some(b)) if b < a))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "imports against the layers ({}):\n{}", LAYERS.join(" -> "), upward.join("\n"));
}

/// The reader sees what it should: a circle and an upward import made on purpose.
#[test]
fn the_reader_finds_a_circle_and_an_upward_import() {
    let all: BTreeMap<String, String> = [
        ("".to_string(), String::new()),
        ("store".to_string(), "use crate::estimator::calibrate::X;".to_string()),
        ("estimator".to_string(), String::new()),
        ("estimator::calibrate".to_string(), "use crate::{mpi, store::{Store, index::Y}};".to_string()),
        ("store::index".to_string(), String::new()),
        ("mpi".to_string(), String::new()),
    ]
    .into();
    let mut graph = Graph::new();
    for (module, code) in &all {
        let edges = graph.entry(module.clone()).or_default();
        for path in named_paths(code) {
            if let Some(target) = resolve(&all, module, &path).filter(|t| t != module && !t.is_empty()) {
                edges.insert(target);
            }
        }
    }
    assert_eq!(graph["estimator::calibrate"], ["mpi", "store", "store::index"].map(String::from).into());
    assert_eq!(circles(&graph).len(), 1);
    assert_eq!(layer("store::index"), Some(5));
}
