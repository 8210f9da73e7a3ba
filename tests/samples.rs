//! Every public family-A sample decodes to the kind its TYPE/STYP names (read in place from
//! ../shared/samples; they carry no licence and are never copied into this repository).
//! Samples the index marks as not well-formed must be MALFORMED; samples of other families
//! must not crash the decoder.

use std::path::PathBuf;

use msgx::codec::ignore::IgnoreRules;
use msgx::codec::report::{report, Verdict};
use msgx::error::ErrorClass;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/samples")
}

#[test]
fn every_family_a_sample_decodes_to_its_kind() {
    let dir = samples_dir();
    let index = std::fs::read_to_string(dir.join("INDEX.csv")).unwrap_or_else(|e| {
        panic!("{}: {e} (the shared samples must sit beside the repository)", dir.display())
    });
    let no_rules = IgnoreRules::new(&[]);
    let (mut decoded, mut malformed, mut failures) = (0, 0, Vec::new());
    for line in index.lines().skip(1) {
        let cols: Vec<&str> = line.splitn(5, ',').collect();
        let (file, msg_type, styp, well_formed) = (cols[0], cols[1], cols[2], cols[3]);
        if !file.starts_with("Teemo-Yordles_AWS-DevOps-Demo") {
            continue;
        }
        let raw = std::fs::read_to_string(dir.join(file)).unwrap();
        let (verdict, json) = report(&raw, &no_rules, false);
        let want = format!("{msg_type}-{styp}");
        match (well_formed.starts_with("yes"), verdict) {
            (true, Verdict::Decoded { tag, supported: true }) if tag == want => decoded += 1,
            (false, Verdict::Failed { class: ErrorClass::Malformed }) => malformed += 1,
            (_, v) => {
                failures.push(format!("{file}: want {want} (well-formed: {well_formed}), got {v:?}: {json}"))
            }
        }
    }
    assert!(failures.is_empty(), "{} sample(s) off:\n{}", failures.len(), failures.join("\n"));
    assert!(decoded >= 180, "only {decoded} samples decoded: is the index complete?");
    println!("{decoded} samples decoded to their kind, {malformed} not well-formed ones MALFORMED");
}

#[test]
fn samples_of_other_families_never_crash_the_decoder() {
    let rules = IgnoreRules::new(&[]);
    let mut n = 0;
    for entry in std::fs::read_dir(samples_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "xml") {
            let raw = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            let _ = report(&raw, &rules, false);
            n += 1;
        }
    }
    assert!(n > 200, "found {n} samples");
}
