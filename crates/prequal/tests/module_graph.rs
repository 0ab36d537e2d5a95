//! No crate's source files import each other in a circle: if `a.rs` uses `b.rs`, nothing
//! `b.rs` uses, directly or through a chain, may use `a.rs`. A circle makes every file in it
//! depend on all the others, so none can be read, tested or changed alone (the proxy once had a
//! nine-file one: a thread-local in the server read by the cluster, a body guard calling back
//! into the cluster, one `impl` split over two files). The check runs over every crate of the
//! workspace, each on its own (crates depend on each other only one way, which cargo enforces).
//!
//! It reads each `src/` as text: every path that starts at `crate::`, `super::`, `self::` or
//! at a child module is resolved to the file that defines the module it names (the deepest
//! file on the path: `crate::cluster::Chosen` is `cluster/mod.rs`, `crate::tls::config::X`
//! is `tls/config.rs`). A `mod x;` declaration is not a use, but a re-export (`pub use
//! x::Y`) is, so a `mod.rs` or `lib.rs` that re-exports its children must not be used by them:
//! what children share lives in a leaf file of its own, and a file imports an item from the
//! file that defines it. Comments and literals are skipped.
//! `cargo test -p prequal --test module_graph -- --nocapture` prints every graph.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root (`["cluster", "state"]`); the root is empty.
type ModPath = Vec<String>;

#[test]
fn no_file_imports_itself_through_others() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 10,
        "found only {} crates in {crates:?}",
        dirs.len()
    );
    let mut found = Vec::new();
    for src in &dirs {
        let name = src.parent().unwrap().file_name().unwrap().to_string_lossy();
        let graph = graph(src);
        println!("# {name}");
        for (file, uses) in &graph {
            let list: Vec<&str> = uses.iter().map(String::as_str).collect();
            println!("{file} -> {}", list.join(", "));
        }
        for circle in circles(&graph) {
            found.push(format!("  {name}: {}", circle.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "files in an import circle (each set uses itself through the others):\n{}",
        found.join("\n")
    );
}

/// The checker itself finds a circle, and does not see one in a `mod` declaration, a comment,
/// a string, or a test module's `use super::*`.
#[test]
fn the_check_sees_circles_and_only_them() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n");
    write(
        "a.rs",
        "// crate::c::C in a comment\nuse crate::b::{self, B};\npub struct A;\n\
         #[cfg(test)] mod tests { use super::*; }\n",
    );
    write(
        "b.rs",
        "pub struct B;\nfn f() -> &'static str { \"crate::a\" }\n",
    );
    write("c/mod.rs", "mod d;\npub use self::d::D;\n");
    write("c/d.rs", "pub struct D(crate::b::B);\n");
    let acyclic = graph(&dir);
    assert_eq!(acyclic["a.rs"], BTreeSet::from(["b.rs".to_string()]));
    assert_eq!(acyclic["c/mod.rs"], BTreeSet::from(["c/d.rs".to_string()]));
    assert!(circles(&acyclic).is_empty());

    write("b.rs", "pub struct B(super::c::D);\n");
    write("c/d.rs", "pub struct D(Box<crate::a::A>);\n");
    let circled = graph(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        circles(&circled),
        vec![vec!["a.rs", "b.rs", "c/d.rs", "c/mod.rs"]]
    );
}

/// Each source file (relative to `src`, with `/`) and the other files it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    collect(src, &mut files);
    let modules: BTreeMap<ModPath, String> = files
        .iter()
        .map(|path| {
            let name = relative(src, path);
            (module_of(&name), name)
        })
        .collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let name = relative(src, path);
        let text = std::fs::read_to_string(path).unwrap();
        let here = module_of(&name);
        let mut uses = BTreeSet::new();
        for target in references(&blank_comments_and_literals(&text), &here, &modules) {
            let file = file_of(&target, &modules);
            if file != name {
                uses.insert(file);
            }
        }
        graph.insert(name, uses);
    }
    graph
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn relative(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).unwrap();
    let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy()).collect();
    parts.join("/")
}

/// `lib.rs` is the root, `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`.
fn module_of(file: &str) -> ModPath {
    let stem = file.trim_end_matches(".rs");
    let mut parts: ModPath = stem.split('/').map(str::to_string).collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The file defining the deepest module on `path`.
fn file_of(path: &[String], modules: &BTreeMap<ModPath, String>) -> String {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]))
        .cloned()
        .unwrap_or_default()
}

/// `text` with comments, strings and character literals replaced by spaces.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if i >= chars.len() {
                    break;
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_at(&chars, i) {
            // A raw string: r"..", r#".."#, br"..".
            i += 1 + usize::from(c == 'b') + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal, not a lifetime.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
            continue;
        }
        let end = i.min(chars.len());
        out.extend(
            chars[start..end]
                .iter()
                .map(|&c| if c == '\n' { '\n' } else { ' ' }),
        );
    }
    out
}

/// The number of `#` of the raw string that starts at `chars[i]` (`r"`, `r#"`, `br"`), if one
/// does (`r#type` is a raw identifier, not a string).
fn raw_string_at(chars: &[char], i: usize) -> Option<usize> {
    let before = i.checked_sub(1).map(|p| chars[p]);
    if before.is_some_and(|b| b.is_alphanumeric() || b == '_') {
        return None;
    }
    let r = match chars.get(i)? {
        'r' => i,
        'b' if chars.get(i + 1) == Some(&'r') => i + 1,
        _ => return None,
    };
    let hashes = chars[r + 1..].iter().take_while(|&&h| h == '#').count();
    (chars.get(r + 1 + hashes) == Some(&'"')).then_some(hashes)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::Path);
            i += 2;
            continue;
        }
        if !c.is_whitespace() {
            out.push(Token::Punct(c));
        }
        i += 1;
    }
    out
}

/// Every module path `code` (in module `here`) names.
fn references(code: &str, here: &ModPath, modules: &BTreeMap<ModPath, String>) -> Vec<ModPath> {
    let tokens = tokens(code);
    let ident = |i: usize| match tokens.get(i) {
        Some(Token::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    // Inline modules (`mod tests { .. }`) and the brace depth each one closes at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(name), Some(Token::Punct('{'))) = (ident(i + 1), tokens.get(i + 2)) {
                    inline.push((name.to_string(), depth));
                }
            }
            _ => {}
        }
        let module: ModPath = here
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        let starts_path = matches!(tokens.get(i + 1), Some(Token::Path))
            && !matches!(i.checked_sub(1).map(|p| &tokens[p]), Some(Token::Path));
        let root = match ident(i) {
            Some(root) if starts_path => root,
            _ => {
                i += 1;
                continue;
            }
        };
        let base: Option<ModPath> = match root {
            "crate" => Some(Vec::new()),
            "self" => Some(module.clone()),
            "super" => module.split_last().map(|(_, parent)| parent.to_vec()),
            // A child module named without `self::` (uniform paths).
            child => {
                let mut path = module.clone();
                path.push(child.to_string());
                modules.contains_key(&path).then_some(path)
            }
        };
        let Some(base) = base else {
            i += 1;
            continue;
        };
        i = use_tree(&tokens, i + 2, base, &mut found);
    }
    found
}

/// Reads a path's rest from `tokens[i]` (after `root::`), pushing each full path to `found`;
/// returns the index after it. Groups (`{a, b::{c, self}}`) and `super` segments are followed.
fn use_tree(tokens: &[Token], mut i: usize, mut path: ModPath, found: &mut Vec<ModPath>) -> usize {
    loop {
        match tokens.get(i) {
            Some(Token::Ident(s)) if s == "super" => {
                path.pop();
            }
            Some(Token::Ident(s)) if s == "self" => {}
            Some(Token::Ident(s)) => path.push(s.clone()),
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Punct('}')) | None => return i + 1,
                        Some(Token::Punct(',')) => i += 1,
                        _ => i = use_tree(tokens, i, path.clone(), found),
                    }
                }
            }
            _ => {
                found.push(path);
                return i;
            }
        }
        i += 1;
        if tokens.get(i) != Some(&Token::Path) {
            found.push(path);
            return i;
        }
        i += 1;
    }
}

/// The sets of two or more files that reach each other (Tarjan's strongly connected
/// components), each sorted, in order.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
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
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
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
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}
