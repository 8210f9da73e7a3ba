//! The layers drawn in docs/architecture.md ("Layers"), checked on the source: a stage never
//! imports another stage; a store adapter never imports a stage; `config` is a leaf (#43: it
//! imported the stage runner, the lease and the health check, which import it). Test code
//! (`#[cfg(test)]` modules, `tests.rs` files, the conformance suites) is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The stages: each a room of its own.
const STAGES: [&str; 6] = ["ingress", "pump", "dispatch", "backfill", "jobs", "consistency"];
/// What `config` may import: nothing that acts on it.
const CONFIG_MAY_USE: [&str; 3] = ["config", "clock", "secret"];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules `text` names as `crate::x` (grouped `crate::{x, y}` too).
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String =
                    part.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            out.insert(name);
        }
    }
    out
}

/// Every production file's module and the modules it imports.
fn imports() -> BTreeMap<PathBuf, (String, BTreeSet<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|f| !f.components().any(|c| c.as_os_str() == "conformance"))
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let production = text.split("#[cfg(test)]").next().unwrap_or("");
            let module = module_of(&src, &f);
            (f, (module, uses(production)))
        })
        .collect()
}

#[test]
fn no_import_climbs_the_layers() {
    let mut wrong = Vec::new();
    for (file, (module, used)) in imports() {
        let file = file.display();
        for u in &used {
            if STAGES.contains(&module.as_str()) && STAGES.contains(&u.as_str()) && u != &module {
                wrong.push(format!("{file}: the stage {module} imports the stage {u}"));
            }
            if module == "store" && STAGES.contains(&u.as_str()) {
                wrong.push(format!("{file}: a store adapter imports the stage {u}"));
            }
            if module == "config" && !CONFIG_MAY_USE.contains(&u.as_str()) {
                wrong.push(format!("{file}: config imports {u} (config is a leaf)"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that climb the layers (docs/architecture.md):\n{}", wrong.join("\n"));
}

/// The store adapters: concrete servers' and the in-memory twins'.
const ADAPTERS: [&str; 5] = ["pg", "mailbox", "flights", "kafka", "memory"];
/// The edges, where adapters are made and run (the binary's `src/cli` and `main.rs` reach the
/// library as `msgx::`, an edge of their own): the store rooms themselves, the daemon (its
/// `stores.rs` the factory), and the test builds' simulator and world.
const EDGES: [&str; 4] = ["store", "daemon", "sim", "testkit"];

/// The adapters `text` names by path (`crate::store::pg::…`, grouped or not).
fn adapters_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::store::") {
        let rest = &text[at + "crate::store::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
            None => vec![rest],
        };
        for n in names {
            let n: String = n.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if ADAPTERS.contains(&n.as_str()) {
                out.insert(n);
            }
        }
    }
    out
}

/// #56: rooms that decide (stages, handlers, the codec, lineage, the console…) reach stores
/// only through the ports; an adapter is named only at the edges.
#[test]
fn no_adapter_is_named_outside_the_edges() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for (file, (module, _)) in imports() {
        if EDGES.contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let production = text.split("#[cfg(test)]").next().unwrap_or("");
        for a in adapters_named(production) {
            let rel = file.strip_prefix(&src).unwrap().display().to_string();
            wrong.push(format!("src/{rel}: names the adapter store::{a} (reach it through a port)"));
        }
    }
    assert!(
        wrong.is_empty(),
        "adapters named outside the edges (docs/architecture.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_adapter_check_reads_grouped_and_plain_paths() {
    let text = "use crate::store::pg::Pg;\nuse crate::store::{memory::MemPg, write_token};\nlet x = crate::store::kafka::KafkaProducer::new();";
    let found: Vec<String> = adapters_named(text).into_iter().collect();
    assert_eq!(found, ["kafka", "memory", "pg"]);
}

#[test]
fn the_check_reads_grouped_and_plain_imports() {
    let found = uses("use crate::{pump::Pump, stage};\nlet x = crate::lease::LeasePolicy { .. };");
    assert_eq!(found, ["lease", "pump", "stage"].iter().map(|s| s.to_string()).collect());
}

/// The longest a production function may be (docs/architecture.md, "Invariants"): a longer one
/// is split where its steps are.
const FN_MAX_LINES: usize = 70;

/// `text` with every comment, string and character literal blanked (newlines kept), so that
/// braces are counted only where they are code.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let (c, next) = (b[i], b.get(i + 1).copied());
        let end = if c == '/' && next == Some('/') {
            b[i..].iter().position(|c| *c == '\n').map_or(b.len(), |p| i + p)
        } else if c == '/' && next == Some('*') {
            (i + 2..b.len().saturating_sub(1))
                .find(|k| b[*k] == '*' && b[k + 1] == '/')
                .map_or(b.len(), |k| k + 2)
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && (i == 0 || !ident(b[i - 1])) {
            let hashes = b[i + 1..].iter().take_while(|c| **c == '#').count();
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let from = i + 2 + hashes;
            let rest: String = b[from.min(b.len())..].iter().collect();
            rest.find(&close).map_or(b.len(), |p| from + rest[..p].chars().count() + close.len())
        } else if c == '"' {
            let mut k = i + 1;
            while k < b.len() && b[k] != '"' {
                k += if b[k] == '\\' { 2 } else { 1 };
            }
            k + 1
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            let mut k = i + 1;
            while k < b.len() && b[k] != '\'' {
                k += if b[k] == '\\' { 2 } else { 1 };
            }
            k + 1
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        out.extend(b[i..end].iter().map(|c| blank(*c)));
        i = end;
    }
    out
}

fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Each function of `code` (see [`code_only`]) with a body: its name, first line and length in
/// lines, from the line that names it to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let line_at = |k: usize| chars[..k].iter().filter(|c| **c == '\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = code_find(&chars, i, "fn ") {
        i = at + 3;
        if at > 0 && ident(chars[at - 1]) {
            continue;
        }
        let name: String =
            chars[i..].iter().skip_while(|c| c.is_whitespace()).take_while(|c| ident(**c)).collect();
        let Some(open) = (i..chars.len()).find(|k| chars[*k] == '{' || chars[*k] == ';') else { break };
        if chars[open] == ';' {
            continue;
        }
        let mut depth = 0;
        let close = (open..chars.len()).find(|k| {
            match chars[*k] {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        });
        let close = close.unwrap_or(chars.len() - 1);
        found.push((name, line_at(at), line_at(close) - line_at(at) + 1));
    }
    found
}

fn code_find(chars: &[char], from: usize, what: &str) -> Option<usize> {
    let w: Vec<char> = what.chars().collect();
    (from..chars.len().saturating_sub(w.len() - 1)).find(|k| chars[*k..*k + w.len()] == w[..])
}

/// The files of modules declared `#[cfg(test)] mod x;`: test code, wherever it lives.
fn test_modules(all: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for f in all {
        let text = std::fs::read_to_string(f).unwrap();
        let dir = match f.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => f.parent().unwrap().to_path_buf(),
            _ => f.with_extension(""),
        };
        let lines: Vec<&str> = text.lines().collect();
        for w in lines.windows(2) {
            let name = w[1].trim().strip_prefix("mod ").and_then(|r| r.strip_suffix(';'));
            if let (true, Some(name)) = (w[0].trim() == "#[cfg(test)]", name) {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name));
            }
        }
    }
    out
}

#[test]
fn no_production_function_is_longer_than_seventy_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let tests = test_modules(&all);
    let mut long = Vec::new();
    for f in &all {
        let test_code = f.file_name().is_some_and(|n| n == "tests.rs")
            || f.components().any(|c| c.as_os_str() == "conformance")
            || tests.iter().any(|t| f.starts_with(t));
        if test_code {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        // A `#[cfg(test)] mod tests { … }` at the end is test code.
        let production = code.split("#[cfg(test)]\nmod ").next().unwrap_or("");
        for (name, line, n) in functions(production) {
            if n > FN_MAX_LINES {
                long.push(format!(
                    "{}:{line}: fn {name} has {n} lines",
                    f.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "production functions over {FN_MAX_LINES} lines (split them):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_check_counts_code_not_text() {
    let text = "fn a() {\n    let s = \"}}}\";\n    let c = '}';\n    // }\n    let r = r#\"{\"#;\n}\nfn b<'x>(v: &'x str) -> &'x str {\n    v\n}\n";
    let found = functions(&code_only(text));
    assert_eq!(found, [("a".to_string(), 1, 6), ("b".to_string(), 7, 3)]);
}
