//! Every public family-A sample decodes to the kind its TYPE/STYP names (read in place from
//! ../shared/samples; they carry no licence and are never copied into this repository), and
//! goes through the pipeline on the real services to SUCCEEDED or SKIPPED. Samples the index
//! marks as not well-formed must be MALFORMED; samples of other families must not crash the
//! decoder. Without the shared folder beside the repository these tests say so and pass.

use crate::common;

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
            common::missing(&format!(
                "{} is not readable ({e}); the public samples are not beside the repository",
                dir.display()
            ));
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
        let (verdict, json) = report(&raw, &no_rules, &msgx::codec::Rulebook::this_release(), false);
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

/// (file, TYPE, STYP, well-formed) of every sample in the index, all families.
fn every_sample(index: &str) -> Vec<(String, String, String, bool)> {
    index
        .lines()
        .skip(1)
        .map(|line| line.splitn(5, ',').map(str::to_string).collect::<Vec<_>>())
        .filter(|c| c.len() >= 4 && c[0].ends_with(".xml"))
        .map(|c| (c[0].clone(), c[1].clone(), c[2].clone(), c[3].starts_with("yes")))
        .collect()
}

/// Well-formed samples that are not valid messages, with the outcome they must have and why.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "unidentified-github-repo_id66588740808__FLOP_CLDT__commented-example-with-AOCID_javastring.xml",
    "DEAD",
    "its META has <SEQS> where SEQN belongs: MALFORMED, the identity cannot be built",
)];

#[test]
fn every_well_formed_sample_of_every_family_ends_succeeded_or_skipped_on_the_real_services() {
    use msgx::ingress;
    use msgx::pump::Round;
    let Some(index) = index() else { return };
    let s = common::Services::migrated("");
    let stats = std::sync::Arc::new(msgx::stats::Stats::default());
    let (mut poller, mut pump) = (s.poller(&stats), s.pump(&stats));
    let samples: Vec<String> = every_sample(&index).into_iter().filter(|x| x.3).map(|x| x.0).collect();
    let raws: Vec<String> = samples
        .iter()
        .map(|f| String::from_utf8_lossy(&std::fs::read(samples_dir().join(f)).unwrap()).into_owned())
        .collect();
    let ids = s.insert_inbound(&raws);
    while poller.round(common::now()).unwrap() != ingress::Round::Idle {}
    while let Round::Worked(_) = pump.round(common::now()).unwrap() {}
    let mut pg = s.pg();
    // TYPE-STYP (as decoded) → outcome → count: the table of the closing note.
    let mut table: std::collections::BTreeMap<(String, String), usize> = Default::default();
    let mut off = Vec::new();
    for (file, id) in samples.iter().zip(&ids) {
        let r = pg
            .query_one(
                "SELECT state, error_class, last_error, type_tag FROM proc_state WHERE msg_id = $1",
                &[id],
            )
            .unwrap();
        let (state, class, err, tag): (String, Option<String>, Option<String>, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let outcome = match (&state[..], err.as_deref()) {
            ("SKIPPED", Some(e)) => format!("SKIPPED {}", e.split(':').next().unwrap_or(e)),
            _ => state.clone(),
        };
        *table.entry((tag.unwrap_or_else(|| "-".into()), outcome)).or_default() += 1;
        let excepted = EXCEPTIONS.iter().find(|(f, _, _)| f == file);
        match excepted {
            Some((_, want, _)) if *want == state => {}
            Some((_, want, why)) => off.push(format!("{file}: {state}, expected {want} ({why})")),
            None if state != "SUCCEEDED" && state != "SKIPPED" => {
                off.push(format!("{file}: {state} {class:?} {err:?}"))
            }
            None => {}
        }
    }
    for ((tag, outcome), n) in &table {
        println!("  {tag:<16} {outcome:<28} {n}");
    }
    assert!(off.is_empty(), "{} sample(s) did not end SUCCEEDED or SKIPPED:\n{}", off.len(), off.join("\n"));
    assert!(ids.len() >= 200, "only {} samples", ids.len());
}

#[test]
fn every_platform_sample_decodes_to_its_kind_and_dialect() {
    let dir = samples_dir();
    let Some(index) = index() else { return };
    let no_rules = IgnoreRules::new(&[]);
    let (mut b, mut c, mut failures) = (0, 0, Vec::new());
    for (file, msg_type, styp, well_formed) in every_sample(&index) {
        let family_b = ["DFOE", "DFME", "BASE", "REQE"].contains(&msg_type.as_str());
        let family_c = msg_type.is_empty() && file.contains("TSystems-IMF");
        if !(family_b || family_c) {
            continue;
        }
        let raw = String::from_utf8_lossy(&std::fs::read(dir.join(&file)).unwrap()).into_owned();
        let (verdict, json) = report(&raw, &no_rules, &msgx::codec::Rulebook::this_release(), false);
        let dialect = json["meta"]["dialect"].as_str().unwrap_or("-").to_string();
        match (well_formed, verdict) {
            (true, Verdict::Decoded { tag, supported: true })
                if family_b && tag == format!("{msg_type}-{styp}") && dialect == "B" =>
            {
                b += 1
            }
            (true, Verdict::Decoded { tag, supported: true })
                if family_c && tag.starts_with("IMF-") && dialect == "C" =>
            {
                c += 1
            }
            (false, Verdict::Failed { class: ErrorClass::Malformed }) => {}
            (_, v) => failures.push(format!("{file}: {v:?} dialect {dialect}: {json}")),
        }
    }
    assert!(failures.is_empty(), "{} sample(s) off:\n{}", failures.len(), failures.join("\n"));
    assert!(b >= 25 && c >= 20, "only {b} family-B and {c} family-C samples");
    println!("{b} family-B samples decoded to their kind, {c} family-C documents recognised");
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
            let _ = report(&raw, &rules, &msgx::codec::Rulebook::this_release(), false);
            n += 1;
        }
    }
    assert!(n > 200, "found {n} samples");
}
