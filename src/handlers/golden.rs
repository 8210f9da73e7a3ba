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
            super::FlightState::of(f.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
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
