//! No two modules of a crate reach each other. A circle of modules is a
//! concern without a room of its own: each end can only be read, tested and
//! changed with the other. This reads every `crate::…` and `super::…` path
//! (and `use crate::{…}` groups) in each crate's `src`, comments left out,
//! and fails on any circle, naming its modules.
//!
//! Beyond "no circle", the server's rooms have a direction, written in
//! [`SERVER_ROOMS`]: its two faces (the API and the settings page) never
//! reach each other, and the edge and the state they stand on reach
//! neither face. Only the wiring (`serve`) and the command line mount them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, by its path inside its crate (`[]` is the crate root).
type Module = Vec<String>;

/// The server's rooms, each with the rooms it must never reach.
const SERVER_ROOMS: &[(&str, &[&str])] = &[
    // The two faces: each translates to the plane, neither knows the other.
    ("api", &["admin", "serve", "cli"]),
    ("admin", &["api", "serve", "cli"]),
    // The edge, the state and the counters the faces stand on.
    ("http", &["api", "admin", "serve", "cli"]),
    ("state", &["api", "admin", "http", "serve", "cli"]),
    ("metrics", &["api", "admin", "http", "state", "serve", "cli"]),
    ("openapi", &["admin", "serve", "cli"]),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// Every module of the crate whose sources are under `src`, with its file.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src").with_extension("");
            let mut module: Module =
                relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] || module == ["main"] {
                module.clear();
            }
            found.insert(module, path);
        }
    }
    found
}

/// `text` without its `//` comments (doc comments included: a link in prose
/// is not a dependency). A `//` after a `:` is a URL's (`"http://…"`), not
/// a comment: the rest of its line is still read.
fn without_comments(text: &str) -> String {
    let comment_at =
        |line: &str| line.match_indices("//").map(|(at, _)| at).find(|&at| !line[..at].ends_with(':'));
    text.lines().map(|line| comment_at(line).map_or(line, |at| &line[..at])).collect::<Vec<_>>().join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The longest prefix of `parts` that is a module.
fn module_of(parts: &[String], all: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    (1..=parts.len()).rev().map(|k| parts[..k].to_vec()).find(|prefix| all.contains_key(prefix))
}

/// The modules `me`'s text reaches, its own ancestors and descendants left out.
fn references(text: &str, me: &Module, all: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let text = without_comments(text);
    let mut out = BTreeSet::new();
    for keyword in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(keyword) {
            let start = from + at;
            from = start + keyword.len();
            // Part of a longer path (`other::crate::`, `super::super::`
            // already read) or of a word.
            if text[..start].chars().next_back().is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let base: Module = if keyword == "crate::" {
                Vec::new()
            } else {
                let mut up = 1;
                while text[from..].starts_with("super::") {
                    from += "super::".len();
                    up += 1;
                }
                me[..me.len().saturating_sub(up)].to_vec()
            };
            let rest = &text[from..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: each item's leading path.
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    let parts: Vec<String> = item
                        .trim()
                        .split("::")
                        .map(|p| p.trim().chars().take_while(|c| is_ident(*c)).collect())
                        .take_while(|p: &String| !p.is_empty())
                        .collect();
                    let parts = [base.clone(), parts].concat();
                    out.extend(module_of(&parts, all));
                }
                continue;
            }
            let path: String = rest.chars().take_while(|c| is_ident(*c) || *c == ':').collect();
            let parts: Vec<String> = path.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect();
            let parts = [base.clone(), parts].concat();
            out.extend(module_of(&parts, all));
        }
    }
    out.retain(|other| other != me && !other.starts_with(me) && !me.starts_with(other) && !other.is_empty());
    out
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<BTreeSet<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

/// Every crate's circles, as `crate: a <-> b` lines.
fn circles_of_the_workspace() -> Vec<(String, BTreeSet<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(workspace_root().join("crates")).expect("crates/") {
        let dir = entry.expect("an entry").path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let all = modules(&src);
        let graph: BTreeMap<Module, BTreeSet<Module>> = all
            .iter()
            .map(|(module, path)| {
                let text = std::fs::read_to_string(path).expect("a source file");
                (module.clone(), references(&text, module, &all))
            })
            .collect();
        for circle in circles(&graph) {
            found.push((name.clone(), circle.into_iter().map(|m| m.join("::")).collect()));
        }
    }
    found
}

#[test]
fn no_two_modules_of_a_crate_reach_each_other() {
    let found: Vec<String> = circles_of_the_workspace()
        .into_iter()
        .map(|(name, circle)| {
            format!("crates/{name}: {}", circle.into_iter().collect::<Vec<_>>().join(" <-> "))
        })
        .collect();
    assert!(found.is_empty(), "modules reach each other:\n{}", found.join("\n"));
}

#[test]
fn the_servers_rooms_reach_only_downward() {
    let src = workspace_root().join("crates/server/src");
    let all = modules(&src);
    let mut broken = Vec::new();
    for (module, path) in &all {
        let Some(room) = module.first() else { continue };
        let Some((_, never)) = SERVER_ROOMS.iter().find(|(name, _)| name == room) else { continue };
        let text = std::fs::read_to_string(path).expect("a source file");
        for reached in references(&text, module, &all) {
            if reached.first().is_some_and(|r| never.contains(&r.as_str())) {
                broken.push(format!("{} reaches {}", module.join("::"), reached.join("::")));
            }
        }
    }
    assert!(broken.is_empty(), "the server's rooms reach the wrong way:\n{}", broken.join("\n"));
}

#[test]
fn the_reader_sees_a_circle_and_its_ways_of_writing_a_path() {
    let all: BTreeMap<Module, PathBuf> =
        [vec![], vec!["a".into()], vec!["b".into()], vec!["c".into(), "d".into()]]
            .into_iter()
            .map(|m| (m, PathBuf::new()))
            .collect();
    let a = vec!["a".to_owned()];
    let seen = references(
        "use crate::{c::d::{x, y}};\n// crate::b::nothing\nlet _ = (\"http://x\", crate::b::f());",
        &a,
        &all,
    );
    assert_eq!(seen, [vec!["b".to_owned()], vec!["c".to_owned(), "d".to_owned()]].into_iter().collect());
    let d = vec!["c".to_owned(), "d".to_owned()];
    let seen = references("fn f() { super::super::a::run(); crate::b::go(); my_crate::a::no(); }", &d, &all);
    assert_eq!(seen, [vec!["a".to_owned()], vec!["b".to_owned()]].into_iter().collect(), "{seen:?}");
    let graph: BTreeMap<Module, BTreeSet<Module>> = [
        (vec!["a".to_owned()], [vec!["b".to_owned()]].into_iter().collect()),
        (vec!["b".to_owned()], [vec!["a".to_owned()]].into_iter().collect()),
        (d.clone(), BTreeSet::new()),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&graph).len(), 1);
}
