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
                    // `target: LOG, "…"`: the lines of a stage split over files keep its target.
                    let rest = match rest.strip_prefix("target:") {
                        Some(r) => r.split_once(',').map_or(r, |(_, after)| after).trim_start(),
                        None => rest,
                    };
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

/// The `msgx_…` names in a text, with the suffixes the exposition adds to a histogram taken off.
fn series_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("msgx_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'_' || b[end].is_ascii_digit()) {
            end += 1;
        }
        let name = &text[start..end];
        let name = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        out.insert(name.to_string());
        i = end;
    }
    out
}

/// #22: every series docs/monitoring.md and the packaged Grafana dashboard name is one
/// `/metrics` exports, and every exported series is documented.
#[test]
fn the_dashboard_and_the_monitoring_page_name_only_series_msgx_exports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exported: std::collections::BTreeSet<String> =
        msgx::ops::metrics::SERIES.iter().map(|s| s.to_string()).collect();
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("packaging/grafana/msgx-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    assert!(exprs.len() >= 10, "{} queries", exprs.len());
    let in_dashboard = series_named(&exprs.join("\n"));
    let unknown: Vec<_> = in_dashboard.difference(&exported).collect();
    assert!(unknown.is_empty(), "the dashboard queries series msgx does not export: {unknown:?}");
    let page = std::fs::read_to_string(root.join("docs/monitoring.md")).unwrap();
    let documented = series_named(&page);
    let unknown: Vec<_> = documented.difference(&exported).collect();
    assert!(unknown.is_empty(), "docs/monitoring.md names series msgx does not export: {unknown:?}");
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    assert!(undocumented.is_empty(), "series missing from docs/monitoring.md: {undocumented:?}");
}

/// #22: the list the docs are checked against is what a scrape really holds.
#[test]
fn the_series_list_is_what_a_scrape_holds() {
    use std::sync::Arc;
    let ops = Arc::new(msgx::ops::Ops::new(Arc::new(msgx::stats::Stats::default())));
    // An unreachable PostgreSQL: the store gauges are absent, and msgx_gauges_up says so.
    let mut pg = msgx::store::pg::Pg::new("postgres://msgx@127.0.0.1:9/none?connect_timeout=1").unwrap();
    let m = msgx::ops::metrics::Metrics::new(ops, Arc::new(msgx::clock::FakeClock::new()));
    m.refresh(&mut pg);
    let body = m.render();
    assert!(body.contains("msgx_gauges_up 0"), "{body}");
    let scraped = series_named(&body);
    for s in msgx::ops::metrics::SERIES {
        let store = matches!(
            *s,
            "msgx_queue_messages"
                | "msgx_gauges_age_seconds"
                | "msgx_dead_messages"
                | "msgx_unsupported_messages"
                | "msgx_dead_events"
                | "msgx_outbox_pending"
                | "msgx_outbox_oldest_age_seconds"
                | "msgx_head_age_seconds"
                | "msgx_lag_seconds"
                | "msgx_marks_owed"
                | "msgx_marks_abandoned"
                | "msgx_requests_open"
                | "msgx_requests_awaited"
                | "msgx_stage_stalled"
        );
        assert!(store || scraped.contains(*s), "{s} is listed but not exported:\n{body}");
    }
    let listed: std::collections::BTreeSet<String> =
        msgx::ops::metrics::SERIES.iter().map(|s| s.to_string()).collect();
    let extra: Vec<_> = scraped.difference(&listed).collect();
    assert!(extra.is_empty(), "exported but not listed in SERIES: {extra:?}");
}

/// #42: the `event_key` the reference and events.md describe is the one msgx writes —
/// `MSG_ID.ordinal.digest`, the digest the first 8 hex digits of the payload's SHA-256.
#[test]
fn the_event_key_the_docs_describe_is_the_one_msgx_writes() {
    let e = msgx::domain::MsgEvent {
        event_id: 9,
        msg_id: Some(17),
        target: msgx::domain::Target::KafkaMsg,
        partition_key: "1001".into(),
        state_version: 0,
        payload_json: "{\"n\":1}".into(),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: None,
        ordinal: Some(2),
    };
    let key = e.key();
    let parts: Vec<&str> = key.split('.').collect();
    assert_eq!(&parts[..2], ["17", "2"], "{key}");
    assert!(
        parts.len() == 3 && parts[2].len() == 8 && parts[2].chars().all(|c| c.is_ascii_hexdigit()),
        "{key}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["docs/reference.md", "docs/events.md", "docs/architecture.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        assert!(text.contains("`MSG_ID.ordinal.digest`"), "{doc} does not name the key's digest");
        assert!(!text.contains("(`MSG_ID.ordinal`)"), "{doc} still names the key without its digest");
    }
}
