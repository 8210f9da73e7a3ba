//! docs/reference.md's log-line table against the code (#21 item 8), the way the key and
//! counter tables are checked: every line msgx logs at INFO, WARN or ERROR is listed with its
//! level, and every listed line is one the code writes.

use std::collections::BTreeMap;
use std::path::Path;

/// The words a line starts with, up to its first value: `received msg_id={id}` and the table's
/// `received msg_id=…` are both `received msg_id`.
fn verb(line: &str) -> String {
    let mut words = Vec::new();
    for w in line.split_whitespace() {
        // A value begins: `{…}` in the code, `…`, `<name>` or a capital placeholder (`N`,
        // `ADDR`) in the table.
        let placeholder = w.chars().all(|c| c.is_ascii_uppercase()) && w.len() <= 5;
        let cut = w.find(['{', '…', '=', '<', '(', '"', ':', ';', '\\']);
        if placeholder {
            break;
        }
        match cut {
            Some(0) => break,
            Some(i) => {
                words.push(&w[..i]);
                break;
            }
            None => words.push(w),
        }
    }
    words.join(" ").trim_end_matches(['.', ',']).to_string()
}

/// (verb, level) of every log macro with a literal format string in `src`, outside tests.
fn code_lines() -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("sim") {
                    stack.push(path);
                }
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (level, mac) in [("INFO", "info!("), ("WARN", "warn!("), ("ERROR", "error!(")] {
                for (at, _) in text.match_indices(mac) {
                    let rest = text[at + mac.len()..].trim_start();
                    let Some(lit) = rest.strip_prefix('"') else { continue };
                    let v = verb(lit);
                    if v.is_empty() {
                        continue; // a line built elsewhere (`{n}`, `{e:#}`)
                    }
                    out.entry(v).or_default().push((level.to_string(), name.clone()));
                }
            }
        }
    }
    out
}

/// (verb, levels) of every row of the log-line table (a verb on rows of two levels has both).
fn doc_lines() -> BTreeMap<String, String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md")).unwrap();
    let table = doc.split("## Log lines").nth(1).unwrap().split("\n## ").next().unwrap();
    let mut out = BTreeMap::new();
    for row in
        table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| level") && !l.starts_with("|---"))
    {
        let cells: Vec<&str> = row.split(" | ").collect();
        let level = cells[0].trim_start_matches("| ").to_string();
        // A cell may list alternatives: `a` or `b`, `a`, `b`.
        for line in cells[1].split('`').skip(1).step_by(2) {
            out.entry(verb(line)).and_modify(|l: &mut String| l.push_str(&level)).or_insert(level.clone());
        }
    }
    out
}

#[test]
fn every_logged_line_is_in_the_reference_with_its_level() {
    let doc = doc_lines();
    let code = code_lines();
    // The scan must see the code's lines, or this test proves nothing.
    assert!(
        code.len() >= 60 && doc.len() >= 60,
        "read {} lines in the code, {} in the table",
        code.len(),
        doc.len()
    );
    let mut missing = Vec::new();
    for (v, uses) in code {
        for (level, file) in uses {
            match doc.get(&v) {
                None => missing.push(format!("{level} `{v}` ({file}) is not in docs/reference.md")),
                Some(l) if !l.contains(&level) => {
                    missing.push(format!("`{v}` ({file}) is {level} in the code, {l} in docs/reference.md"))
                }
                Some(_) => {}
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn every_line_in_the_reference_is_one_the_code_writes() {
    let code = code_lines();
    let mut src = String::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                src.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let stale: Vec<String> = doc_lines()
        .into_keys()
        .filter(|v| !code.contains_key(v) && !src.contains(v.as_str()))
        .map(|v| format!("`{v}` is in docs/reference.md but nothing writes it"))
        .collect();
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
