//! Every public family-A sample decodes to the kind its TYPE/STYP names (read in place from
//! ../shared/samples; they carry no licence and are never copied into this repository), and
//! goes through the pipeline on the real services to SUCCEEDED or SKIPPED. Samples the index
//! marks as not well-formed must be MALFORMED; samples of other families must not crash the
//! decoder. Without the shared folder beside the repository these tests say so and pass.

mod common;

use std::path::PathBuf;

use msgx::codec::ignore::IgnoreRules;
use msgx::codec::report::{report, Verdict};
use msgx::error::ErrorClass;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/samples")
}

/// The index, or `None` (with a note) when the shared samples are not beside the repository.
fn index() -> Option<String> {
    let dir = samples_dir();
    match std::fs::read_to_string(dir.join("INDEX.csv")) {
        Ok(i) => Some(i),
        Err(e) => {
            println!(
                "skipped: {} is not readable ({e}); the public samples are not beside the repository",
                dir.display()
            );
            None
        }
    }
}

/// (file, TYPE, STYP, well-formed) of every family-A sample in the index.
fn family_a(index: &str) -> Vec<(String, String, String, bool)> {
    index
        .lines()
        .skip(1)
        .map(|line| line.splitn(5, ',').map(str::to_string).collect::<Vec<_>>())
        .filter(|c| c.len() >= 4 && c[0].starts_with("Teemo-Yordles_AWS-DevOps-Demo"))
        .map(|c| (c[0].clone(), c[1].clone(), c[2].clone(), c[3].starts_with("yes")))
        .collect()
}

#[test]
fn every_family_a_sample_decodes_to_its_kind() {
    let dir = samples_dir();
    let Some(index) = index() else { return };
    let no_rules = IgnoreRules::new(&[]);
    let (mut decoded, mut malformed, mut failures) = (0, 0, Vec::new());
    for (file, msg_type, styp, well_formed) in family_a(&index) {
        let raw = std::fs::read_to_string(dir.join(&file)).unwrap();
        let (verdict, json) = report(&raw, &no_rules, false);
        let want = format!("{msg_type}-{styp}");
        match (well_formed, verdict) {
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
fn every_well_formed_family_a_sample_ends_succeeded_or_skipped_on_the_real_services() {
    use msgx::ingress;
    use msgx::pump::Round;
    let Some(index) = index() else { return };
    let s = common::Services::migrated("");
    let stats = std::sync::Arc::new(msgx::stats::Stats::default());
    let (mut poller, mut pump) = (s.poller(&stats), s.pump(&stats));
    let mut samples: Vec<(String, String, String)> =
        family_a(&index).into_iter().filter(|x| x.3).map(|(f, t, st, _)| (f, t, st)).collect();
    // The seasonal plan (SCHS) last: until it has a handler it would hold the FIFO.
    samples.sort_by_key(|(_, t, _)| t == "SCHS");
    let raws: Vec<String> = samples
        .iter()
        .map(|(f, _, _)| String::from_utf8_lossy(&std::fs::read(samples_dir().join(f)).unwrap()).into_owned())
        .collect();
    let ids = s.insert_inbound(&raws);
    while poller.round(common::now()).unwrap() != ingress::Round::Idle {}
    while let Round::Worked(_) = pump.round(common::now()).unwrap() {}
    let mut pg = s.pg();
    let mut by_outcome: std::collections::BTreeMap<String, usize> = Default::default();
    let mut off = Vec::new();
    for ((file, t, _), id) in samples.iter().zip(&ids) {
        let r = pg
            .query_one("SELECT state, error_class, last_error FROM proc_state WHERE msg_id = $1", &[id])
            .unwrap();
        let (state, class, err): (String, Option<String>, Option<String>) = (r.get(0), r.get(1), r.get(2));
        *by_outcome.entry(state.clone()).or_default() += 1;
        if t != "SCHS" && state != "SUCCEEDED" && state != "SKIPPED" {
            off.push(format!("{file}: {state} {class:?} {err:?}"));
        }
    }
    println!("family-A samples through the pipeline: {by_outcome:?}");
    assert!(off.is_empty(), "{} sample(s) did not end SUCCEEDED or SKIPPED:\n{}", off.len(), off.join("\n"));
    assert!(ids.len() >= 180, "only {} samples", ids.len());
}

#[test]
fn samples_of_other_families_never_crash_the_decoder() {
    if index().is_none() {
        return;
    }
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
