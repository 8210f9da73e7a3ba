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

#[test]
fn the_check_reads_grouped_and_plain_imports() {
    let found = uses("use crate::{pump::Pump, stage};\nlet x = crate::lease::LeasePolicy { .. };");
    assert_eq!(found, ["lease", "pump", "stage"].iter().map(|s| s.to_string()).collect());
}
