//! The provider's modules import each other without a cycle: `chat/` knows nothing of the
//! server, `failure/` nothing of the handlers, each file of `cmd/` only the shared parts below
//! it. An edge A -> B is a path from a file of module A into module B (`crate::b`, `super::b`,
//! `self::b`, or a child module by name); a parent declaring a child (`mod b;`) is not one.
//! The check runs on every file, and again with modules grouped at depth 1 and 2
//! (`server`, `server::cmd`, ...), where a cycle between groups counts too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `a::b::c` path in `code`, as its segments (a `{` ends one).
fn paths(code: &str) -> Vec<Vec<String>> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts =
            is_word(bytes[i]) && (i == 0 || !(is_word(bytes[i - 1]) || bytes[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        loop {
            let begin = i;
            while i < bytes.len() && is_word(bytes[i]) {
                i += 1;
            }
            segs.push(bytes[begin..i].iter().collect::<String>());
            if i + 2 < bytes.len()
                && bytes[i] == ':'
                && bytes[i + 1] == ':'
                && is_word(bytes[i + 2])
            {
                i += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            out.push(segs);
        }
    }
    out
}

fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut all = Vec::new();
    files(src, &mut all);
    let modules: BTreeMap<Module, PathBuf> =
        all.iter().map(|f| (module_of(src, f), f.clone())).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        for segs in paths(&code(&text)) {
            let (mut base, mut rest) = match segs[0].as_str() {
                "crate" => (Vec::new(), &segs[1..]),
                "self" => (module.clone(), &segs[1..]),
                "super" => {
                    let ups = segs.iter().take_while(|s| *s == "super").count();
                    (module[..module.len() - ups].to_vec(), &segs[ups..])
                }
                _ => (module.clone(), &segs[..]), // a child module by name, if it is one
            };
            let relative = !matches!(segs[0].as_str(), "crate" | "self" | "super");
            let mut found = !relative;
            while let Some((first, tail)) = rest.split_first() {
                let mut next = base.clone();
                next.push(first.clone());
                if !modules.contains_key(&next) {
                    break;
                }
                (base, rest, found) = (next, tail, true);
            }
            if found && !base.is_empty() && &base != module {
                edges.entry(module.clone()).or_default().insert(base);
            }
        }
    }
    edges
}

/// The modules of one cycle, if there is one.
fn cycle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        at: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(i) = path.iter().position(|m| m == at) {
            return Some(path[i..].to_vec());
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

fn grouped(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    depth: usize,
) -> BTreeMap<Module, BTreeSet<Module>> {
    let cut = |m: &Module| m[..m.len().min(depth)].to_vec();
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            if cut(from) != cut(to) {
                out.entry(cut(from)).or_default().insert(cut(to));
            }
        }
    }
    out
}

fn names(cycle: &[Module]) -> String {
    cycle
        .iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn the_providers_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = edges(&src);
    assert!(
        edges.contains_key(&vec!["server".to_string(), "provider".to_string()]),
        "the graph was read: {edges:?}"
    );
    if let Some(found) = cycle(&edges) {
        panic!("import cycle between files: {}", names(&found));
    }
    for depth in [1, 2] {
        if let Some(found) = cycle(&grouped(&edges, depth)) {
            panic!(
                "import cycle (modules grouped at depth {depth}): {}",
                names(&found)
            );
        }
    }
}

#[test]
fn a_cycle_is_found() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Module>();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    edges
        .entry(m("chat::turn"))
        .or_default()
        .insert(m("server::writer"));
    edges
        .entry(m("server::turn"))
        .or_default()
        .insert(m("chat"));
    assert!(cycle(&edges).is_none());
    assert_eq!(
        cycle(&grouped(&edges, 1)).map(|c| names(&c)),
        Some("chat -> server".to_string())
    );
    assert_eq!(
        paths("use super::shared::{Shared, X};\nlet a = crate::chat::sweep(x);"),
        vec![
            vec!["super".to_string(), "shared".into()],
            vec!["crate".into(), "chat".into(), "sweep".into()]
        ]
    );
}
