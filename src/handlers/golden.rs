//! Golden tests: for every message kind msgx handles, an input of its own and the Decision it
//! yields, rendered as text a reviewer can read in `src/handlers/golden/*.txt`.
//! `UPDATE_EXPECT=1 cargo test --lib handlers::golden` rewrites them after a deliberate change.

use expect_test::expect_file;

use super::{decide, View};
use crate::codec::decode;
use crate::fixtures::{self, EVERY_SUBTYPE};

fn render_decision(view: &View, raw: &str, msg_id: i64) -> String {
    let msg = decode(raw).unwrap_or_else(|e| panic!("fixture does not decode: {e}\n{raw}"));
    let mut out = format!("== {}\n", msg.kind.type_tag());
    if !view.flights.is_empty() || !view.window.is_empty() {
        for (flid, f) in &view.flights {
            let fields: Vec<String> = f.fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("   held: flight {flid} {}\n", fields.join(" ")));
        }
        if !view.window.is_empty() {
            out.push_str(&format!("   held: window {}\n", view.window.join(",")));
        }
    }
    match decide(view, &msg, msg_id) {
        Err(e) => out.push_str(&format!("   REJECT {e:?}\n")),
        Ok(d) => {
            if d.snapshot {
                out.push_str("   snapshot: generation advances (CAS on msg_id)\n");
            }
            for c in &d.flights {
                let mut parts = Vec::new();
                if c.delete {
                    parts.push("DELETE".to_string());
                }
                parts.extend(c.set.iter().map(|(k, v)| format!("{k}={v}")));
                parts.extend(c.clear.iter().map(|k| format!("{k}=<cleared>")));
                if let Some(s) = c.sodt {
                    parts.push(format!("(sodt index {s})"));
                }
                out.push_str(&format!("   flight {}: {}\n", c.flid, parts.join("  ")));
            }
            for e in &d.events {
                out.push_str(&format!(
                    "   event {} {} key={} {}\n",
                    e.target, e.event_type, e.partition_key, e.payload_json
                ));
            }
            for r in &d.references {
                out.push_str(&format!("   ref {r:?}\n"));
            }
            for w in &d.warnings {
                out.push_str(&format!("   WARN {w}\n"));
            }
            if d.flights.is_empty() && d.events.is_empty() && d.references.is_empty() {
                out.push_str("   (no change, no event)\n");
            }
        }
    }
    out
}

fn held() -> View {
    let f = [("FFID", "MU-5101-A-05MAR261430-D"), ("RENO", "B-1234"), ("STND", "212")];
    View {
        flights: [(
            "77".to_string(),
            super::FlightState::of(f.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).into(),
        )]
        .into(),
        window: vec![],
    }
}

#[test]
fn flop_every_subtype() {
    let mut out = String::from(
        "Every FLOP subtype: the message body, then the Decision for flight 77 as msgx holds it.\n\n",
    );
    for (styp, body, _) in EVERY_SUBTYPE {
        out.push_str(&format!("-- body: {body}\n"));
        out.push_str(&render_decision(&held(), &fixtures::flop_body(styp, "77", body), 1001));
        out.push('\n');
    }
    out.push_str("-- FDEL\n");
    out.push_str(&render_decision(&held(), &fixtures::flop_body("FDEL", "77", "<FDEL/>"), 1002));
    out.push_str("\n-- a FLOP for a flight msgx does not hold (created from its FFID)\n");
    out.push_str(&render_decision(
        &View::default(),
        &fixtures::flop_body("STND", "88", "<STND>305</STND>"),
        1003,
    ));
    out.push_str("\n-- a change that changes nothing\n");
    out.push_str(&render_decision(&held(), &fixtures::flop_body("STND", "77", "<STND>212</STND>"), 1004));
    out.push_str("\n-- an empty element clears\n");
    out.push_str(&render_decision(&held(), &fixtures::flop_body("RENO", "77", "<RENO/>"), 1005));
    expect_file!["golden/flop.txt"].assert_eq(&out);
}

fn schd(styp: &str, body: &str) -> String {
    fixtures::other(2001, "SCHD", styp, &format!("<SCHD>{body}</SCHD>"))
}

#[test]
fn schd_snapshots_and_adft() {
    let f1 = "<FLTR><FLID>501</FLID><ALCD>MU</ALCD><FLNO>MU5101</FLNO><MVIN>D</MVIN><SODT>05MAR260905</SODT>\
              <ROUT RTNO=\"1\"><APCD>SHA</APCD><SCAT>05MAR261130</SCAT></ROUT><STND>212</STND></FLTR>";
    let f2 = "<FLTR><FLID>502</FLID><FLNO>MU5102</FLNO><MVIN>A</MVIN><SODT>05MAR261745</SODT><STND>214</STND></FLTR>";
    let window = View { flights: Default::default(), window: vec!["499".into(), "501".into()] };
    let mut out = String::from(
        "The daily plan (SCHD).\n\n-- DNLD: 501 and 502; the plan held 499 and 501 in the window\n",
    );
    out.push_str(&render_decision(&window, &schd("DNLD", &format!("<RECS>2</RECS>{f1}{f2}")), 2001));
    out.push_str("\n-- RESP is a snapshot too\n");
    out.push_str(&render_decision(&window, &schd("RESP", &format!("<RECS>1</RECS>{f1}")), 2002));
    out.push_str("\n-- ADFT only adds or updates\n");
    out.push_str(&render_decision(&window, &schd("ADFT", f2), 2003));
    out.push_str("\n-- RECS that does not match\n");
    out.push_str(&render_decision(&window, &schd("DNLD", &format!("<RECS>3</RECS>{f1}{f2}")), 2004));
    out.push_str("\n-- one FLID on two operating days\n");
    let f1b = f1.replace("05MAR260905", "06MAR260905");
    out.push_str(&render_decision(&window, &schd("DNLD", &format!("{f1}{f1b}")), 2005));
    expect_file!["golden/schd.txt"].assert_eq(&out);
}

#[test]
fn reference_data() {
    let rec = |k: &str, n: &str| {
        format!("<GLST><GCOD>{k}</GCOD><GTNM>Gate {n}</GTNM><GNMC>{n}号登机口</GNMC><GTML>T2</GTML></GLST>")
    };
    let mut out = String::from("Reference data (REF_MASTER).\n\n");
    for (styp, body) in [
        ("DNLD", format!("<RECS>2</RECS>{}{}", rec("G1", "1"), rec("G2", "2"))),
        ("ADD", format!("<RECS>1</RECS>{}", rec("G3", "3"))),
        ("UPD", rec("G3", "3A")),
        ("DEL", "<RECS>1</RECS><GLST><GCOD>G2</GCOD></GLST>".to_string()),
        ("DNLD", format!("<RECS>2</RECS>{}{}", rec("G1", "1"), rec("G1", "1"))),
        // Vendor feeds miscount: what is present is applied, the mismatch reported.
        ("ADD", format!("<RECS>2</RECS>{}", rec("G4", "4"))),
        ("DNLD", format!("<RECS>1</RECS>{}{}", rec("G1", "1"), rec("G2", "2"))),
        // A full list that lacks records would delete them: refused.
        ("DNLD", format!("<RECS>3</RECS>{}{}", rec("G1", "1"), rec("G2", "2"))),
    ] {
        out.push_str(&render_decision(&View::default(), &fixtures::other(3001, "GLST", styp, &body), 3001));
        out.push('\n');
    }
    expect_file!["golden/reference.txt"].assert_eq(&out);
}

#[test]
fn platform_every_kind() {
    let mut out = String::from(
        "Family B (the integration platform): every kind, its own fixture, and the Decision.\n\n",
    );
    let held = |fields: &[(&str, &str)]| {
        let f: crate::handlers::Flight = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        View {
            flights: [("9001".to_string(), crate::handlers::FlightState::of(f).into())].into(),
            window: vec![],
        }
    };
    let flight = held(&[("FFID", "MU-9001-20260305090000-D"), ("STAT", ""), ("CFTP", "A320")]);
    out.push_str("-- DFOE-DFIE: a flight added\n");
    out.push_str(&render_decision(
        &View::default(),
        &fixtures::platform(1, "DFOE", "DFIE", &fixtures::dflt("9001", "0900", "<AIRL><ARPT><APNO>1</APNO><APCD>XXX</APCD><FPTT>20260305090000</FPTT></ARPT><ARPT><APNO>2</APNO><APCD>PEK</APCD><FPLT>20260305113000</FPLT></ARPT></AIRL>")),
        10,
    ));
    out.push_str("\n-- DFOE-DFDE: a flight deleted\n");
    out.push_str(&render_decision(
        &flight,
        &fixtures::platform(2, "DFOE", "DFDE", "<DFLT><FLID>9001</FLID></DFLT>"),
        11,
    ));
    out.push_str("\n-- DFOE-DFDL: the full table; 9003 is held in its window and absent from it\n");
    let table = format!(
        "<RECD>2</RECD>{}{}",
        fixtures::dflt("9001", "0900", ""),
        fixtures::dflt(
            "9002",
            "1400",
            "<STLS><STND><STNO>1</STNO><CODE>215</CODE><ESTR>20260305133000</ESTR></STND></STLS>"
        )
    );
    let window = View { flights: Default::default(), window: vec!["9001".into(), "9003".into()] };
    out.push_str(&render_decision(&window, &fixtures::platform(3, "DFOE", "DFDL", &table), 12));
    out.push_str("\n-- DFOE-DFDL whose RECD is not its count\n");
    let short = format!("<RECD>3</RECD>{}", fixtures::dflt("9001", "0900", ""));
    out.push_str(&render_decision(&window, &fixtures::platform(4, "DFOE", "DFDL", &short), 13));
    for (styp, meaning, _) in crate::codec::platform::EVENTS {
        let body = match *styp {
            "ARRE" => "<STAT>ARR</STAT><FRLT>20260305114500</FRLT>",
            "DEPE" => "<STAT>DEP</STAT><FRTT>20260305091200</FRTT>",
            "BORE" => "<STAT>BOR</STAT><BORT>20260305083000</BORT>",
            "DLYE" | "CANE" | "RTNE" | "ALTE" | "BAKE" => "<ABST>DLY</ABST><ABRS>001006</ABRS>",
            "GTLS" => "<GTLS><GATE><GTNO>1</GTNO><CODE>104</CODE><ESTR>20260305081000</ESTR><EEND>20260305085000</EEND></GATE></GTLS>",
            "BLLS" => "<BLLS><BELT><BTNO>1</BTNO><CODE>7</CODE></BELT></BLLS>",
            "STLS" => "<STLS><STND><STNO>1</STNO><CODE>215</CODE></STND></STLS>",
            "CKLS" | "CKIE" | "CKOE" => "<CKLS><FCES>20260305063000</FCES><CNTR><CKNO>1</CKNO><CODE>C12</CODE></CNTR></CKLS>",
            "CFCE" => "<CFTP>A321</CFTP><CFNO>B-1234</CFNO>",
            "SFLG" => "<SFLG><SFLGINFO><SFAW>FM</SFAW><SFNO>9001</SFNO></SFLGINFO></SFLG>",
            "TRML" => "<TMCD><NMCD>T2</NMCD></TMCD>",
            "FATT" => "<FATT>INT</FATT>",
            "HBTT" => "<NFLN>9011</NFLN><NAWC>MU</NAWC>",
            "AFID" => "<AFID>9002</AFID>",
            "ONRE" => "<STAT>ONR</STAT><PAST>20260305071000</PAST>",
            "LBDE" => "<LBDT>20260305084500</LBDT>",
            "POKE" => "<STAT>POK</STAT><POKT>20260305085000</POKT>",
            "FPTT" | "FETT" | "FRTT" | "AIRL" | "APRTINFO" => "<AIRL><ARPT><APNO>1</APNO><APCD>XXX</APCD><FETT>20260305091500</FETT></ARPT></AIRL>",
            _ => "<VIP>1</VIP>",
        };
        out.push_str(&format!("\n-- DFME-{styp}: {meaning}\n"));
        out.push_str(&render_decision(
            &flight,
            &fixtures::platform(100, "DFME", styp, &format!("<DFLT><FLID>9001</FLID>{body}</DFLT>")),
            20,
        ));
    }
    let gate = |code: &str| {
        format!("<GATE><ID>{code}0</ID><CODE>{code}</CODE><ENNM>Gate {code}</ENNM><TMLC>T2</TMLC></GATE>")
    };
    for (styp, body) in [
        ("GTIE", gate("A1") + &gate("A2")),
        ("GTUE", gate("A2")),
        ("GTDE", gate("A1")),
        ("GTDL", gate("A2") + &gate("A4")),
        ("GTDL", String::new()),
    ] {
        out.push_str(&format!("\n-- BASE-{styp}\n"));
        out.push_str(&render_decision(&View::default(), &fixtures::platform(200, "BASE", styp, &body), 30));
    }
    expect_file!["golden/platform.txt"].assert_eq(&out);
}

#[test]
fn schs_season() {
    let rec = |flno: &str, mvin: &str| {
        format!(
            "<FLTR><ALCD>MU</ALCD><FLNO>{flno}</FLNO><MVIN>{mvin}</MVIN><STDT>25OCT26</STDT><EDDT>27MAR27</EDDT>\
             <DYOP>1234567</DYOP><SCHT>0905</SCHT><ROUT RTNO=\"1\"><APCD>PEK</APCD><SCAT>1130</SCAT></ROUT></FLTR>"
        )
    };
    let body = |recs: usize, flights: &[String]| {
        format!(
            "<SCHS><SNAM>W26</SNAM><APCD>XXX</APCD><SDAT>25OCT26</SDAT><EDAT>27MAR27</EDAT><RECS>{recs}</RECS>{}</SCHS>",
            flights.concat()
        )
    };
    let mut out = String::from(
        "SCHS: the seasonal plan, kept whole in own PostgreSQL; nothing for Redis, no event.\n\n",
    );
    out.push_str("-- DNLD\n");
    let two = [rec("MU5101", "D"), rec("MU5102", "A")];
    out.push_str(&render_decision(&View::default(), &fixtures::other(1, "SCHS", "DNLD", &body(2, &two)), 40));
    out.push_str("\n-- RESP whose RECS is not its count\n");
    out.push_str(&render_decision(&View::default(), &fixtures::other(2, "SCHS", "RESP", &body(3, &two)), 41));
    expect_file!["golden/schs.txt"].assert_eq(&out);
}

/// The golden decisions' digest: every `golden/*.txt` but the ledger, by name.
fn golden_digest() -> String {
    use sha2::{Digest, Sha256};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/handlers/golden");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt") && n != RULES_LEDGER)
        .collect();
    names.sort();
    let mut h = Sha256::new();
    for n in &names {
        h.update(n.as_bytes());
        h.update(std::fs::read(dir.join(n)).unwrap());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Each rules version and the digest of the golden decisions it makes (#52).
const RULES_LEDGER: &str = "rules.txt";

/// #52: a release that decides some input differently must say so — its rulebook's version
/// (`codec::Rulebook::this_release`, #65) names the rules a message was decided under, and the consistency check re-decides only under the same.
/// `golden/rules.txt` holds each version's digest of the golden decisions: a change to them
/// under a version already listed fails here; a new version adds its line (UPDATE_EXPECT=1).
#[test]
fn the_rules_version_moves_with_the_golden_decisions() {
    let digest = golden_digest();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/handlers/golden").join(RULES_LEDGER);
    let ledger = std::fs::read_to_string(&path).unwrap_or_default();
    let versions: Vec<(u32, String)> = ledger
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (v, d) = l.split_once(' ').expect("`VERSION sha256:DIGEST`");
            (v.parse().expect("a version"), d.trim_start_matches("sha256:").to_string())
        })
        .collect();
    let current = crate::codec::Rulebook::this_release().version();
    match versions.iter().find(|(v, _)| *v == current) {
        Some((_, d)) => assert_eq!(
            d, &digest,
            "the golden decisions changed under RULES_VERSION {current}: a release that decides some input \
             differently bumps THIS_RELEASE in src/codec/rulebook.rs (then UPDATE_EXPECT=1 adds its line to golden/{RULES_LEDGER})"
        ),
        None => {
            let last = versions.iter().map(|(v, _)| *v).max().unwrap_or(0);
            assert_eq!(current, last + 1, "the rules version moves by one, from {last}");
            let line = format!("{current} sha256:{digest}\n");
            assert!(
                std::env::var_os("UPDATE_EXPECT").is_some(),
                "RULES_VERSION {current} is not in golden/{RULES_LEDGER}: add `{}` (UPDATE_EXPECT=1 does)",
                line.trim()
            );
            std::fs::write(&path, ledger + &line).unwrap();
        }
    }
}
