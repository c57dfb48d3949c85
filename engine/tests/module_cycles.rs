//! No import cycle between the engine's top-level modules.
//!
//! This test is the tool that checks it (rustc accepts cycles between modules of one crate, and
//! clippy has no lint for them): it reads `engine/src`, builds the graph of references from each
//! top-level module (`engine`, `store`, `ssh`, `transport`, `remote`, `tmux`, `slurm`,
//! `keeper`, `connect`, `machine`, `records`, `util`, `error`, `hint`, `secret`, whatever
//! `lib.rs` declares) to the others, and fails naming a cycle with the file and line of each
//! reference in it. A reference is a path through the crate root in code: `crate::x`,
//! `crate::{x, y::z}`, or `super::x` from a module's top file; comments (doc links included)
//! and string literals are not code and do not count. Test code inside a module counts.
//!
//! Run it with `cargo test -p remote-runner-engine --test module_cycles` (CI runs it with the
//! engine's tests). `MODULE_CYCLES_SRC=<dir>` checks another source tree (an older checkout).
//!
//! The layers it keeps apart (docs/architecture.md): the byte transports (`transport`, `ssh`)
//! below the control plane (`remote`), which is below the scripts that use it (`tmux`,
//! `slurm`), the keeper and the engine; `records`, `machine`, `error`, `hint`, `util`, `secret`
//! at the bottom.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where a reference was seen: file (relative to `src/`) and line.
type Site = (String, usize);

/// module -> (referenced module -> first site).
type Graph = BTreeMap<String, BTreeMap<String, Site>>;

#[test]
fn no_cycle_between_top_level_modules() {
    let src = std::env::var_os("MODULE_CYCLES_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let graph = graph(&src);
    // The scan sees references at all (a scanner that found none would pass vacuously).
    for (from, to) in [
        ("remote", "transport"),
        ("engine", "store"),
        ("tmux", "remote"),
    ] {
        assert!(
            graph.get(from).is_some_and(|m| m.contains_key(to)),
            "the scan found no reference from {from} to {to}: it is broken"
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        let mut text = String::new();
        for pair in cycle.windows(2) {
            let (file, line) = &graph[&pair[0]][&pair[1]];
            text.push_str(&format!("\n  {} -> {} ({file}:{line})", pair[0], pair[1]));
        }
        panic!(
            "import cycle between the engine's top-level modules: {}{text}\nmove the code to \
             the module it belongs to (the lower layer must not name the higher one)",
            cycle.join(" -> ")
        );
    }
}

/// The top-level modules `lib.rs` declares: `mod` lines, and the names listed in its
/// `internal_modules!(...)` (private modules that the `testing` feature makes public).
fn top_modules(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let code = code_only(&lib);
    let mut modules: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            let name = rest.trim_end_matches(';').trim();
            // The macro's own body (`pub mod $name;`) names no module.
            (!name.starts_with('$')).then(|| name.to_string())
        })
        .collect();
    if let Some(start) = code.find("internal_modules!(") {
        let list = &code[start + "internal_modules!(".len()..];
        let list = &list[..list.find(')').expect("internal_modules!( is closed")];
        modules.extend(
            list.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
        );
    }
    modules
}

fn graph(src: &Path) -> Graph {
    let modules = top_modules(src);
    assert!(modules.len() > 5, "lib.rs declares too few modules");
    let known: BTreeSet<&str> = modules.iter().map(String::as_str).collect();
    let mut graph = Graph::new();
    for module in &modules {
        let edges = graph.entry(module.clone()).or_default();
        let mut files = Vec::new();
        let file = src.join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        collect(&src.join(module), &mut files);
        assert!(!files.is_empty(), "no source for module {module}");
        for path in files {
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let depth = module_depth(&rel);
            let text = std::fs::read_to_string(&path).expect("read a source file");
            for (line, target) in references(&code_only(&text), depth) {
                if target != *module && known.contains(target.as_str()) {
                    edges.entry(target).or_insert_with(|| (rel.clone(), line));
                }
            }
        }
    }
    graph
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// How deep below the crate root the module of a file is: `x.rs` and `x/mod.rs` are 1,
/// `x/y.rs` and `x/y/mod.rs` are 2.
fn module_depth(rel: &str) -> usize {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts.last() == Some(&"mod.rs") {
        parts.len() - 1
    } else {
        parts.len()
    }
}

/// The top-level modules a file's code names through the crate root, with their lines.
fn references(code: &str, depth: usize) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !is_ident(bytes[i - 1]);
        if boundary && code[i..].starts_with("crate::") {
            let at = i + "crate::".len();
            found.extend(
                names_at(code, at)
                    .into_iter()
                    .map(|n| (line_of(code, i), n)),
            );
            i = at;
            continue;
        }
        if boundary && code[i..].starts_with("super::") {
            let mut at = i;
            let mut ups = 0;
            while code[at..].starts_with("super::") {
                at += "super::".len();
                ups += 1;
            }
            // `super` that climbs to the crate root names a top-level module next.
            if ups >= depth {
                found.extend(
                    names_at(code, at)
                        .into_iter()
                        .map(|n| (line_of(code, i), n)),
                );
            }
            i = at;
            continue;
        }
        i += 1;
    }
    found
}

/// The first path segment at `at`: one name, or each item's first name in a `{...}` group.
fn names_at(code: &str, at: usize) -> Vec<String> {
    let bytes = code.as_bytes();
    if bytes.get(at) == Some(&b'{') {
        let mut names = Vec::new();
        let (mut depth, mut i, mut expect) = (0usize, at, true);
        while i < bytes.len() {
            match bytes[i] {
                b'{' => {
                    depth += 1;
                    expect = depth == 1;
                }
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b',' if depth == 1 => expect = true,
                c if expect && depth == 1 && is_ident(c) => {
                    let end = ident_end(bytes, i);
                    names.push(code[i..end].to_string());
                    expect = false;
                    i = end;
                    continue;
                }
                c if !c.is_ascii_whitespace() => expect = false,
                _ => {}
            }
            i += 1;
        }
        return names;
    }
    let end = ident_end(bytes, at);
    if end > at {
        vec![code[at..end].to_string()]
    } else {
        Vec::new()
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && is_ident(bytes[i]) {
        i += 1;
    }
    i
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&b| b == b'\n').count() + 1
}

/// `text` with comments and the contents of string and char literals blanked (newlines kept,
/// so lines still count right).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (i == 0 || !is_ident(b[i - 1]))
            && matches!(b.get(i + 1), Some(b'"') | Some(b'#'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let mut end = vec![b'"'];
            end.extend(std::iter::repeat_n(b'#', hashes));
            out.extend(std::iter::repeat_n(b' ', j + 1 - i));
            i = j + 1;
            while i < b.len() && !b[i..].starts_with(&end) {
                blank(&mut out, b[i]);
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', end.len().min(b.len() - i)));
            i += end.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' {
            // A char literal ('a', '\n', '\''), not a lifetime ('a, 'static).
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    out.extend(std::iter::repeat_n(b' ', n));
                    i += n;
                }
                None => {
                    out.push(b[i]);
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out.truncate(b.len());
    String::from_utf8_lossy(&out).into_owned()
}

/// A cycle (first module repeated at the end), if the graph has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|m| m.keys()) {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let start = path.iter().position(|n| n == next).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, graph, marks, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(node, graph, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_scanner_reads_paths_not_comments_or_strings() {
    let code = code_only(
        "use crate::{a::X, b, c::{d, e}};\n// crate::f\nlet s = \"crate::g\";\n\
         let c = '\"'; x = crate::h::y; /* crate::i */ fn l<'a>() {}\nsuper::super::j::k();\n",
    );
    let names: Vec<String> = references(&code, 2).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["a", "b", "c", "h", "j"]);
    // From a module's own file, one `super` already names the crate root.
    let names: Vec<String> = references("super::m::n", 1)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["m"]);
    assert!(references("super::m::n", 2).is_empty());
}
