//! `cargo xtask layers`: the file-level dependency graph of `src/`, checked.
//!
//! A file depends on another when it names it through a `crate::` or a
//! `super::` path (in a `use` or in code). A path through a module that
//! re-exports (`pub use`, including globs) is followed to the file that
//! defines the name, so `crate::Event` counts as a use of `src/event.rs`,
//! not of `src/lib.rs`. A parent naming its own children (`mod x;`,
//! `pub use x::Y`, `x::f()`) is not a dependency: a parent module is the
//! facade of its children. Comments, doc comments and string literals are
//! ignored. Files inside a backend's folder (`src/backend/<name>/`) are left
//! out; a path into one counts as a use of `src/backend/mod.rs`.
//!
//! The check fails on:
//! - any cycle between files (each one is printed). One group of files
//!   counts as a single node: the core values (`src/core/` and
//!   `src/error.rs`), because `Error` carries devices and device
//!   constructors return `Error`, a mutual reference between types of one
//!   layer that no file split removes. A cycle that leaves the group and
//!   comes back is still reported;
//! - a file of `src/profiler/` that uses anything but the core values
//!   (`src/core/`), the backend interface (files directly in
//!   `src/backend/`), `src/error.rs` and the profiler itself: recording sits
//!   below the runtime objects (`Event`, `Buffer`, guards, the free
//!   functions, the stream-operation path).
//!
//! The scan is textual (a small lexer, no parser): it is exact for the
//! code in this repository (plain `use` trees, no `#[path]`, no macros that
//! build paths) and errs on the side of reporting a dependency.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root (`["profiler", "json"]`).
type ModPath = Vec<String>;

/// Directories under `src/` whose sub-folders are left out of the graph.
const FOLDERS_LEFT_OUT: &str = "backend";
/// Where the profiler lives, and what it may use besides itself.
const PROFILER: &str = "src/profiler/";
const PROFILER_MAY_USE: &[&str] = &["src/core/", "src/error.rs"];
/// Groups of files that form one node of the graph (see the module docs):
/// (name, file name prefixes).
const UNITS: &[(&str, &[&str])] = &[("src/core/ + src/error.rs", &["src/core/", "src/error.rs"])];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// Replaces comments and the contents of string and char literals with
/// spaces (keeping line structure irrelevant: only tokens matter).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && raw_prefix_ok(&b, i)
            && raw_string_end(&b, i).is_some()
        {
            i = raw_string_end(&b, i).unwrap_or(b.len());
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && char_literal_end(&b, i).is_some() {
            i = char_literal_end(&b, i).unwrap_or(b.len());
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the `r` at `i` starts a raw string (`r"`, `br"`), rather than
/// ending an identifier.
fn raw_prefix_ok(b: &[char], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).and_then(|j| b.get(j)).copied();
    match before(1) {
        Some('b') => !before(2).is_some_and(is_ident),
        Some(c) => !is_ident(c),
        None => true,
    }
}

/// For `r"..."` or `r#"..."#` starting at `i`: the index after it.
fn raw_string_end(b: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < b.len() {
        if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(b.len())
}

/// For a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) at `i`: the index
/// after it; `None` for a lifetime (`'a`).
fn char_literal_end(b: &[char], i: usize) -> Option<usize> {
    match b.get(i + 1)? {
        '\\' => {
            let mut j = i + 3;
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            Some(j + 1)
        }
        _ if b.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// One leaf of a `use` tree: the path as written and the name it binds
/// (`None` for a glob).
type UseLeaf = (Vec<String>, Option<String>);

/// Parses the `use` tree starting at `toks[*i]` (after `use`), up to `;`.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(s)) if s == "as" => {
                *i += 1;
                let alias = ident(toks.get(*i)).map(str::to_owned);
                *i += 1;
                if !path.is_empty() {
                    out.push((path, alias));
                }
                return;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::Path) => *i += 1,
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, None));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while !matches!(toks.get(*i), None | Some(Tok::Punct('}'))) {
                    use_tree(toks, i, &path, out);
                    if toks.get(*i) == Some(&Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => {
                // `,`, `}` or `;`: the end of this leaf.
                if let Some(name) = path.last().cloned() {
                    let name = if name == "self" {
                        path.pop();
                        path.last().cloned().unwrap_or(name)
                    } else {
                        name
                    };
                    out.push((path, Some(name)));
                }
                return;
            }
        }
    }
}

/// What one file says about itself and the paths it names.
#[derive(Debug, Default)]
struct File {
    /// `src/profiler/json/mod.rs`
    name: String,
    module: ModPath,
    /// Names this file binds with top-level `use`s: name -> absolute path.
    uses: HashMap<String, ModPath>,
    /// Top-level glob `use`s (absolute paths).
    globs: Vec<ModPath>,
    /// Items defined here (including inline modules).
    defines: HashSet<String>,
    /// `crate::`/`super::` paths named anywhere (absolute).
    refs: Vec<ModPath>,
}

/// Makes `path` (as written in module `at`) absolute, if it starts with
/// `crate`, `super` or `self`, or with one of `children` (a child module
/// of `at`). `None` for paths into other crates or local names.
fn absolute(path: &[String], at: &[String], children: &HashSet<String>) -> Option<ModPath> {
    let (first, rest) = path.split_first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => at.to_vec(),
        "super" => {
            let mut m = at.to_vec();
            m.pop()?;
            m
        }
        child if children.contains(child) => {
            let mut m = at.to_vec();
            m.push(child.to_owned());
            m
        }
        _ => return None,
    };
    let mut rest = rest.iter().peekable();
    if first == "super" {
        while rest.peek().is_some_and(|s| *s == "super") {
            base.pop()?;
            rest.next();
        }
    }
    base.extend(rest.cloned());
    Some(base)
}

fn scan(name: String, module: ModPath, text: &str) -> File {
    let toks = tokens(&strip(text));
    let mut file = File {
        name,
        module: module.clone(),
        ..File::default()
    };
    // Child modules: `mod x;` (files) and `mod x { ... }` (inline).
    let mut children = HashSet::new();
    for w in toks.windows(3) {
        if let (Tok::Ident(kw), Tok::Ident(n), Tok::Punct(';' | '{')) = (&w[0], &w[1], &w[2])
            && kw == "mod"
        {
            children.insert(n.clone());
        }
    }
    // Inline modules being inside: (name, brace depth at which it opened).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let at: ModPath = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        match &toks[i] {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
            }
            Tok::Ident(kw)
                if matches!(
                    kw.as_str(),
                    "struct"
                        | "enum"
                        | "fn"
                        | "trait"
                        | "type"
                        | "const"
                        | "static"
                        | "union"
                        | "mod"
                        | "macro_rules"
                ) =>
            {
                let n = match toks.get(i + 1) {
                    Some(Tok::Punct('!')) => ident(toks.get(i + 2)),
                    t => ident(t),
                };
                if let Some(n) = n {
                    if depth == 0 {
                        file.defines.insert(n.to_owned());
                    }
                    if kw == "mod" && toks.get(i + 2) == Some(&Tok::Punct('{')) {
                        inline.push((n.to_owned(), depth));
                    }
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "use" && toks.get(i.wrapping_sub(1)) != Some(&Tok::Path) => {
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                for (path, bound) in leaves {
                    let Some(abs) = absolute(&path, &at, &children) else {
                        continue;
                    };
                    if path.first().is_some_and(|f| f == "crate" || f == "super") {
                        file.refs.push(abs.clone());
                    }
                    if depth == 0 {
                        match bound {
                            Some(name) => {
                                file.uses.insert(name, abs);
                            }
                            None => file.globs.push(abs),
                        }
                    }
                }
            }
            Tok::Ident(first) if first == "crate" || first == "super" => {
                // A path in code: `crate::a::b`, `super::super::x`.
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Path) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => path.push(s.to_owned()),
                        None => break,
                    }
                    j += 2;
                }
                if path.len() > 1
                    && let Some(abs) = absolute(&path, &at, &children)
                {
                    file.refs.push(abs);
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    file
}

/// The dependency graph of the files of a source tree.
#[derive(Debug)]
pub struct Graph {
    files: Vec<File>,
    by_module: HashMap<ModPath, usize>,
    /// Module paths of folders left out (`["backend", "cpu"]`).
    left_out: HashSet<ModPath>,
    /// Per file, the files it uses (by index).
    pub edges: Vec<BTreeSet<usize>>,
    /// Nodes: a file, or a unit of [`UNITS`].
    nodes: Vec<String>,
    /// Per node, the nodes it uses.
    node_edges: Vec<BTreeSet<usize>>,
}

impl Graph {
    /// Scans `src` (a crate's `src/` directory).
    pub fn scan(src: &Path) -> Result<Graph, String> {
        let mut paths = Vec::new();
        walk(src, &mut paths)?;
        paths.sort();
        let mut files = Vec::new();
        let mut left_out = HashSet::new();
        for path in paths {
            let rel = path
                .strip_prefix(src)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.len() >= 3 && parts[0] == FOLDERS_LEFT_OUT {
                left_out.insert(parts[..2].to_vec());
                continue;
            }
            let mut module = parts.clone();
            let last = module.pop().unwrap_or_default();
            match last.strip_suffix(".rs") {
                Some("mod") => {}
                Some("lib" | "main") if module.is_empty() => {}
                Some(stem) => module.push(stem.to_owned()),
                None => continue,
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            let name = format!("src/{}", parts.join("/"));
            files.push(scan(name, module, &text));
        }
        Ok(Graph::new(files, left_out))
    }

    fn new(files: Vec<File>, left_out: HashSet<ModPath>) -> Graph {
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let mut g = Graph {
            files,
            by_module,
            left_out,
            edges: Vec::new(),
            nodes: Vec::new(),
            node_edges: Vec::new(),
        };
        g.edges = (0..g.files.len())
            .map(|i| {
                g.files[i]
                    .refs
                    .iter()
                    .filter_map(|r| g.resolve(r, 0).map(|(f, _)| f))
                    .filter(|&f| f != i)
                    .collect()
            })
            .collect();
        let mut node_of = Vec::with_capacity(g.files.len());
        for f in &g.files {
            let name = UNITS
                .iter()
                .find(|(_, prefixes)| prefixes.iter().any(|p| f.name.starts_with(p)))
                .map_or(f.name.as_str(), |(unit, _)| unit);
            let node = match g.nodes.iter().position(|n| n == name) {
                Some(n) => n,
                None => {
                    g.nodes.push(name.to_owned());
                    g.nodes.len() - 1
                }
            };
            node_of.push(node);
        }
        g.node_edges = vec![BTreeSet::new(); g.nodes.len()];
        for (i, deps) in g.edges.iter().enumerate() {
            for &j in deps {
                if node_of[i] != node_of[j] {
                    g.node_edges[node_of[i]].insert(node_of[j]);
                }
            }
        }
        g
    }

    /// The file that defines what `path` names, and whether the name was
    /// found there (rather than just the deepest module on the path).
    fn resolve(&self, path: &[String], depth: u32) -> Option<(usize, bool)> {
        let mut module: ModPath = Vec::new();
        let mut i = 0;
        while i < path.len() {
            let mut next = module.clone();
            next.push(path[i].clone());
            if self.by_module.contains_key(&next) {
                module = next;
                i += 1;
            } else if self.left_out.contains(&next) {
                return Some((*self.by_module.get(&module)?, true));
            } else {
                break;
            }
        }
        let at = *self.by_module.get(&module)?;
        let Some(name) = path.get(i) else {
            return Some((at, true));
        };
        let file = &self.files[at];
        if file.defines.contains(name) || depth > 16 {
            return Some((at, true));
        }
        if let Some(target) = file.uses.get(name) {
            let mut p = target.clone();
            p.extend(path[i + 1..].iter().cloned());
            if let Some(found) = self.resolve(&p, depth + 1) {
                return Some(found);
            }
        }
        for glob in &file.globs {
            let mut p = glob.clone();
            p.extend(path[i..].iter().cloned());
            if let Some((f, true)) = self.resolve(&p, depth + 1) {
                return Some((f, true));
            }
        }
        Some((at, false))
    }

    /// The file names.
    pub fn name(&self, i: usize) -> &str {
        &self.files[i].name
    }

    /// The node names (files, or units of files).
    pub fn node(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    /// Cycles between nodes (node indices, first repeated at the end): for
    /// each node not on a cycle reported already, the shortest cycle
    /// through it, if any.
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        let mut out: Vec<Vec<usize>> = Vec::new();
        for start in 0..self.nodes.len() {
            if out.iter().any(|c| c.contains(&start)) {
                continue;
            }
            if let Some(cycle) = self.shortest_cycle(start) {
                out.push(cycle);
            }
        }
        out
    }

    /// The shortest path from `start` back to itself (breadth first).
    fn shortest_cycle(&self, start: usize) -> Option<Vec<usize>> {
        let mut came_from: HashMap<usize, usize> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for &w in &self.node_edges[v] {
                if w == start {
                    let mut path = vec![start, v];
                    let mut at = v;
                    while at != start {
                        at = came_from[&at];
                        path.push(at);
                    }
                    path.reverse();
                    return Some(path);
                }
                if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(w) {
                    e.insert(v);
                    queue.push_back(w);
                }
            }
        }
        None
    }

    /// Uses of files outside what the profiler may use: (user, used).
    pub fn profiler_violations(&self) -> Vec<(usize, usize)> {
        let allowed = |name: &str| {
            name.starts_with(PROFILER)
                || PROFILER_MAY_USE.iter().any(|p| name.starts_with(p))
                || name
                    .strip_prefix("src/backend/")
                    .is_some_and(|rest| !rest.contains('/'))
        };
        let mut out = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            if f.name.starts_with(PROFILER) {
                for &j in &self.edges[i] {
                    if !allowed(&self.files[j].name) {
                        out.push((i, j));
                    }
                }
            }
        }
        out
    }

    /// Nodes by layer: a node's level is one more than the highest level of
    /// the nodes it uses (0: uses none); nodes in or above a cycle have
    /// none (`usize::MAX`).
    pub fn levels(&self) -> BTreeMap<usize, Vec<usize>> {
        let n = self.nodes.len();
        let mut level: Vec<Option<usize>> = vec![None; n];
        // Relax n times; without cycles that settles every level.
        for _ in 0..=n {
            let mut changed = false;
            for i in 0..n {
                let l = self.node_edges[i]
                    .iter()
                    .map(|&j| level[j].map(|l| l + 1))
                    .try_fold(0, |acc, l| l.map(|l| acc.max(l)));
                if l.is_some() && l != level[i] {
                    level[i] = l;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut out: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, l) in level.into_iter().enumerate() {
            out.entry(l.unwrap_or(usize::MAX)).or_default().push(i);
        }
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Runs the check on `src`; prints the layers, and the problems if any.
pub fn check(src: &Path, verbose: bool) -> Result<(), String> {
    let g = Graph::scan(src)?;
    let edges: usize = g.edges.iter().map(BTreeSet::len).sum();
    let mut problems = Vec::new();
    for cycle in g.cycles() {
        let names: Vec<&str> = cycle.iter().map(|&i| g.node(i)).collect();
        problems.push(format!("import cycle: {}", names.join(" -> ")));
    }
    for (user, used) in g.profiler_violations() {
        problems.push(format!(
            "{} uses {}: the profiler may use only src/core/, the backend interface (src/backend/*.rs), src/error.rs and itself",
            g.name(user),
            g.name(used)
        ));
    }
    if verbose || !problems.is_empty() {
        for (level, files) in g.levels() {
            let names: Vec<&str> = files.iter().map(|&i| g.node(i)).collect();
            if level == usize::MAX {
                eprintln!("layers: in cycles: {}", names.join(", "));
            } else {
                eprintln!("layers: level {level}: {}", names.join(", "));
            }
        }
    }
    if verbose {
        for (i, deps) in g.edges.iter().enumerate() {
            let names: Vec<&str> = deps.iter().map(|&j| g.name(j)).collect();
            eprintln!("layers: {} -> {}", g.name(i), names.join(", "));
        }
    }
    eprintln!(
        "layers: {} files, {edges} dependencies, {} problem(s)",
        g.files.len(),
        problems.len()
    );
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        eprintln!("layers: {p}");
    }
    Err(format!("layers: {} problem(s)", problems.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str, &str)]) -> Graph {
        let files = files
            .iter()
            .map(|(name, module, text)| {
                let module = module
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                scan((*name).to_owned(), module, text)
            })
            .collect();
        Graph::new(
            files,
            HashSet::from([vec!["backend".to_owned(), "cpu".to_owned()]]),
        )
    }

    fn deps(g: &Graph, i: usize) -> Vec<&str> {
        g.edges[i].iter().map(|&j| g.name(j)).collect()
    }

    #[test]
    fn follows_re_exports_and_ignores_comments_and_strings() {
        let g = graph(&[
            (
                "src/lib.rs",
                "",
                "mod a; mod b; pub mod p; pub use a::Thing; pub use p::*;",
            ),
            ("src/a.rs", "a", "pub struct Thing;"),
            (
                "src/b.rs",
                "b",
                "// uses crate::p::x\n/// [`X`](crate::p::X)\nfn f() -> crate::Thing { let s = \"crate::p::X\"; let c = '\"'; todo!() }",
            ),
            ("src/p/mod.rs", "p", "mod x; pub use x::{X, Y as Z};"),
            ("src/p/x.rs", "p::x", "pub struct X; pub struct Y;"),
            (
                "src/c.rs",
                "c",
                "use crate::{X as _, p::Z}; use crate::backend::cpu::Cpu;",
            ),
            ("src/backend/mod.rs", "backend", "pub mod cpu;"),
        ]);
        assert_eq!(deps(&g, 2), ["src/a.rs"]);
        assert_eq!(deps(&g, 5), ["src/p/x.rs", "src/backend/mod.rs"]);
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn reports_cycles_through_super_and_crate_paths() {
        let g = graph(&[
            ("src/lib.rs", "", "mod ops; mod p;"),
            ("src/ops.rs", "ops", "use crate::p::r::hook; pub fn f() {}"),
            ("src/p/mod.rs", "p", "mod r; mod e;"),
            ("src/p/r.rs", "p::r", "pub fn hook() { super::e::g() }"),
            ("src/p/e.rs", "p::e", "pub fn g() { crate::ops::f() }"),
        ]);
        let cycles: Vec<Vec<&str>> = g
            .cycles()
            .iter()
            .map(|c| c.iter().map(|&i| g.node(i)).collect())
            .collect();
        assert_eq!(
            cycles,
            [["src/ops.rs", "src/p/r.rs", "src/p/e.rs", "src/ops.rs"]]
        );
        assert_eq!(g.profiler_violations(), []);
    }

    #[test]
    fn the_core_values_are_one_node() {
        let g = graph(&[
            ("src/lib.rs", "", "mod core; mod error; mod x;"),
            ("src/core/mod.rs", "core", "mod device;"),
            (
                "src/core/device.rs",
                "core::device",
                "use crate::error::Error; pub struct Device;",
            ),
            (
                "src/error.rs",
                "error",
                "use crate::core::device::Device; pub enum Error { D(Device) }",
            ),
            ("src/x.rs", "x", "pub struct X;"),
        ]);
        assert!(g.cycles().is_empty());
        let g = graph(&[
            ("src/lib.rs", "", "mod core; mod error; mod x;"),
            ("src/core/mod.rs", "core", "mod device;"),
            (
                "src/core/device.rs",
                "core::device",
                "use crate::error::Error; pub struct Device;",
            ),
            (
                "src/error.rs",
                "error",
                "use crate::core::device::Device; pub enum Error { D(crate::x::X) }",
            ),
            (
                "src/x.rs",
                "x",
                "pub fn f() -> crate::core::device::Device {}",
            ),
        ]);
        let cycles: Vec<Vec<&str>> = g
            .cycles()
            .iter()
            .map(|c| c.iter().map(|&i| g.node(i)).collect())
            .collect();
        assert_eq!(
            cycles,
            [[
                "src/core/ + src/error.rs",
                "src/x.rs",
                "src/core/ + src/error.rs"
            ]]
        );
    }

    #[test]
    fn super_inside_an_inline_module_is_the_file_itself() {
        let g = graph(&[
            ("src/lib.rs", "", "mod a;"),
            (
                "src/a.rs",
                "a",
                "fn f() {} #[cfg(test)] mod tests { use super::*; fn g() { super::f() } }",
            ),
        ]);
        assert!(g.edges[1].is_empty());
    }

    #[test]
    fn the_profiler_uses_only_core_backend_and_error() {
        let g = graph(&[
            ("src/lib.rs", "", "mod event; mod profiler; mod core;"),
            ("src/event.rs", "event", "pub struct Event;"),
            ("src/core/mod.rs", "core", "pub struct Device;"),
            (
                "src/profiler/mod.rs",
                "profiler",
                "use crate::core::Device; fn f(e: &crate::event::Event) {}",
            ),
        ]);
        assert_eq!(g.profiler_violations(), [(3, 1)]);
    }
}
