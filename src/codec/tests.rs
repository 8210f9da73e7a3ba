//! Codec tests on messages written for msgx (never the public samples, which carry no licence;
//! tests/samples.rs checks those in place).

use super::*;
use crate::fixtures;

fn flop_msg(styp: &str, flid: &str, body: &str) -> String {
    fixtures::other(
        1,
        "FLOP",
        styp,
        &format!("<FLOP><FLID>{flid}</FLID><FFID>MU-5101-A-05MAR261430-D</FFID>{body}</FLOP>"),
    )
}

fn fields(styp: &str, body: &str) -> Vec<(String, Option<String>)> {
    let m = decode(&flop_msg(styp, "77", body)).unwrap_or_else(|e| panic!("FLOP-{styp}: {e}"));
    assert_eq!(m.kind.type_tag(), format!("FLOP-{styp}"));
    let Body::Flop { records } = m.body else { panic!("FLOP-{styp}: not a FLOP body") };
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].flid, "77");
    records[0].fields.clone()
}

use crate::fixtures::EVERY_SUBTYPE;

#[test]
fn every_flop_subtype_decodes_to_its_normalised_fields() {
    for (styp, body, want) in EVERY_SUBTYPE {
        let got = fields(styp, body);
        let want: Vec<(String, Option<String>)> =
            want.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))).collect();
        assert_eq!(got, want, "FLOP-{styp}");
    }
}

#[test]
fn every_subtype_of_the_table_has_a_fixture_here() {
    for st in flop::SUBTYPES {
        let covered = st.styp == "FDEL" || EVERY_SUBTYPE.iter().any(|(s, _, _)| *s == st.styp);
        assert!(covered, "FLOP-{} has no fixture in EVERY_SUBTYPE", st.styp);
    }
    assert_eq!(flop::SUBTYPES.len(), 50);
}

#[test]
fn decodes_meta_and_a_flop_record() {
    let raw = fixtures::flop(42, "stnd", "1001", &[("STND", Some("A12"))]);
    let m = decode(&raw).unwrap();
    assert_eq!(
        (m.meta.sndr.as_str(), m.meta.seqn.as_str(), m.meta.dttm.as_str()),
        ("AODB", "42", "20260101083000")
    );
    assert_eq!((m.meta.msg_type.as_str(), m.meta.styp.as_str()), ("FLOP", "STND"), "codes are upper-cased");
    assert_eq!(m.kind, MsgKind::Flop("STND"));
    let Body::Flop { records } = m.body else { panic!("not a FLOP body") };
    assert_eq!(records[0].ffid.as_deref(), Some("MX-1001-D-01JAN260900-D"));
    assert_eq!(records[0].fields, vec![("STND".to_string(), Some("A12".to_string()))]);
}

#[test]
fn an_empty_element_clears_and_an_empty_list_clears_the_list() {
    assert_eq!(fields("CNCL", "<CNCL></CNCL>"), vec![("CNCL".to_string(), None)]);
    assert_eq!(fields("CNCL", "<CNCL/>"), vec![("CNCL".to_string(), None)]);
    assert_eq!(fields("GTDT", "<GTDT/>"), vec![("GTDT".to_string(), None)]);
    assert_eq!(
        fields("EXSS", "<EXSC>X</EXSC><EXSR/>"),
        vec![("EXSC".to_string(), Some("X".to_string())), ("EXSR".to_string(), None)]
    );
}

#[test]
fn a_subtype_element_that_is_absent_is_no_change() {
    assert_eq!(fields("HNAG", "<PHAG>1</PHAG>"), vec![("PHAG".to_string(), Some("1".to_string()))]);
    assert!(fields("TOBT", "").is_empty(), "nothing to change, nothing decoded");
}

#[test]
fn lists_are_ordered_by_their_sequence_attribute() {
    let f = fields("GTDT", "<GTDT GTNO=\"10\"><GATE>B</GATE></GTDT><GTDT GTNO=\"2\"><GATE>A</GATE></GTDT>");
    assert_eq!(f[0].1.as_deref(), Some(r#"[{"GATE":"A","GTNO":"2"},{"GATE":"B","GTNO":"10"}]"#));
}

#[test]
fn fdel_is_its_own_kind_and_deletes() {
    let m = decode(&flop_msg("FDEL", "15", "<FDEL></FDEL>")).unwrap();
    assert_eq!(m.kind, MsgKind::Fdel);
    assert_eq!(m.kind.type_tag(), "FLOP-FDEL");
    let Body::Flop { records } = m.body else { panic!() };
    assert!(records[0].delete && records[0].fields.is_empty());
}

#[test]
fn flop_repeats_per_flight() {
    let raw = fixtures::other(
        1,
        "FLOP",
        "STND",
        "<FLOP><FLID>1</FLID><STND>A1</STND></FLOP><FLOP><FLID>2</FLID><STND>A2</STND></FLOP>",
    );
    let Body::Flop { records } = decode(&raw).unwrap().body else { panic!() };
    let flids: Vec<_> = records.iter().map(|r| r.flid.as_str()).collect();
    assert_eq!(flids, ["1", "2"]);
}

#[test]
fn codec_errors_name_the_field_and_the_value() {
    for (styp, body, words) in [
        ("EOBT", "<EOBT>2026-03-05 14:00</EOBT>", "EOBT of FLID 77: \"2026-03-05 14:00\" is not a time"),
        ("MAXP", "<MAXP>many</MAXP>", "MAXP of FLID 77: \"many\" is not an integer"),
        (
            "DELY",
            "<DELY CODE=\"93\" DURA=\"45m\">x</DELY>",
            "DELY@DURA of FLID 77: \"45m\" is not a duration hhmm",
        ),
        ("STND", "<STND>1</STND><GATE>2</GATE>", "carries <GATE>, which is not an element of that subtype"),
        (
            "GTDT",
            "<GTDT GTNO=\"1\"><GATE>G1</GATE><BRIDGE>x</BRIDGE></GTDT>",
            "element <BRIDGE> this codec does not know",
        ),
        ("FDIV", "<FDIV WHO=\"x\">y</FDIV>", "attribute WHO this codec does not know"),
        ("STND", "<STND>1</STND><STND>2</STND>", "<STND> appears 2 times"),
        ("STND", "<STND><X>1</X></STND>", "should be a plain value"),
    ] {
        let strict = super::decode_body_with(
            super::decode_meta(&flop_msg(styp, "77", body)).unwrap(),
            true,
            &super::Rulebook::this_release(),
        );
        let err = strict.unwrap_err();
        assert_eq!(err.class, ErrorClass::CodecError, "FLOP-{styp} {body}: {err}");
        assert!(err.detail.contains(words), "{:?} should contain {words:?}", err.detail);
    }
}

#[test]
fn the_tolerant_reader_decodes_what_it_knows_and_lists_the_rest() {
    for (styp, body, known, unknown) in [
        ("STND", "<STND>1</STND><GATE>2</GATE>", ("STND", Some("1")), "GATE"),
        (
            "GTDT",
            "<GTDT GTNO=\"1\"><GATE>G1</GATE><BRIDGE>x</BRIDGE></GTDT>",
            ("GTDT", Some(r#"[{"GATE":"G1","GTNO":"1"}]"#)),
            "GTDT/BRIDGE",
        ),
        ("FDIV", "<FDIV WHO=\"x\">y</FDIV>", ("FDIV", Some(r#"{"REASON":"y"}"#)), "FDIV@WHO"),
        ("STND", "<STND VNDR=\"a\">3</STND>", ("STND", Some("3")), "STND@VNDR"),
    ] {
        let m = decode(&flop_msg(styp, "77", body)).unwrap_or_else(|e| panic!("{body}: {e}"));
        let super::Body::Flop { records } = &m.body else { panic!("{m:?}") };
        let f: Vec<(&str, Option<&str>)> =
            records[0].fields.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
        assert_eq!(f, vec![known], "{body}");
        assert_eq!(m.unknown, vec![unknown.to_string()], "{body}");
    }
    // What the tolerant reader cannot decide stays an error: a bad value, a repeated element.
    for body in ["<STND>1</STND><STND>2</STND>", "<EOBT>soon</EOBT>"] {
        let styp = if body.contains("EOBT") { "EOBT" } else { "STND" };
        assert_eq!(decode(&flop_msg(styp, "77", body)).unwrap_err().class, ErrorClass::CodecError, "{body}");
    }
}

#[test]
fn tolerates_ddtm_rcvr_and_lower_case_codes() {
    let raw = "<MSG><META><SNDR>AODB</SNDR><RCVR>MSGX</RCVR><SEQN>7</SEQN><DDTM>20260101000000</DDTM>\
               <TYPE>flop</TYPE><STYP>Stnd</STYP></META><FLOP><FLID>9</FLID><stnd>B1</stnd></FLOP></MSG>";
    let m = decode(raw).unwrap();
    assert_eq!(m.meta.dttm, "20260101000000");
    assert_eq!(m.kind.type_tag(), "FLOP-STND");
}

#[test]
fn malformed_cases() {
    let meta = |t: &str, s: &str| {
        format!("<META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>{t}</TYPE><STYP>{s}</STYP></META>")
    };
    let cases = [
        ("".to_string(), "empty"),
        ("   ".to_string(), "empty"),
        ("not xml at all".to_string(), "not XML"),
        ("<MSG><META>".to_string(), "not closed"),
        ("<ROOT/>".to_string(), "not <MSG>"),
        ("<MSG><FLOP><FLID>1</FLID></FLOP></MSG>".to_string(), "no <META>"),
        (
            "<MSG><META><SNDR>A</SNDR><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META></MSG>"
                .to_string(),
            "<SEQN>",
        ),
        (format!("<MSG>{}<FLOP><STND>1</STND></FLOP></MSG>", meta("FLOP", "STND")), "<FLID>"),
        (format!("<MSG>{}</MSG>", meta("FLOP", "STND")), "no <FLOP>"),
        (format!("<MSG>{}</MSG>", meta("SCHD", "DNLD")), "no <SCHD>"),
        (
            format!(
                "<MSG>{}<SCHD><RECS>1</RECS><FLTR><SODT>05MAR261400</SODT></FLTR></SCHD></MSG>",
                meta("SCHD", "DNLD")
            ),
            "<FLTR> has no <FLID>",
        ),
        (
            format!("<MSG>{}<SCHD><FLTR><FLID>1</FLID></FLTR></SCHD></MSG>", meta("SCHD", "ADFT")),
            "has no <SODT>",
        ),
        (format!("<MSG>{}<SCHD><RECS>two</RECS></SCHD></MSG>", meta("SCHD", "DNLD")), "<RECS> \"two\""),
        (
            format!("<MSG>{}<RECS>1</RECS><GLST><GTNM>x</GTNM></GLST></MSG>", meta("GLST", "ADD")),
            "a GLST record has no <GCOD>",
        ),
    ];
    for (raw, words) in &cases {
        let err = decode(raw).unwrap_err();
        assert_eq!(err.class, ErrorClass::Malformed, "{raw:?}: {err}");
        assert!(err.detail.contains(words), "{raw:?}: {err} should mention {words:?}");
    }
}

#[test]
fn unknown_types_and_subtypes_are_unsupported_never_malformed() {
    for (t, s, tag) in [
        ("XYZW", "ABCD", "XYZW-ABCD"),
        ("FLOP", "SFGS", "FLOP-SFGS"),
        ("SCHD", "WEEK", "SCHD-WEEK"),
        ("SCHS", "ADFT", "SCHS-ADFT"),
        ("SLST", "MERGE", "SLST-MERGE"),
    ] {
        let body =
            if t == "FLOP" { "<FLOP><FLID>1</FLID><XYZ>2</XYZ></FLOP>" } else { "<ANY a='1'><THING/></ANY>" };
        let m = decode(&fixtures::other(1, t, s, body)).unwrap();
        assert!(matches!(m.kind, MsgKind::Unsupported { .. }), "{t}-{s}");
        assert_eq!(m.kind.type_tag(), tag);
        assert_eq!(m.body, Body::Unread);
    }
}

fn schd(styp: &str, body: &str) -> Message {
    decode(&fixtures::other(9, "SCHD", styp, &format!("<SCHD>{body}</SCHD>"))).unwrap()
}

/// Read straight into one map since #23: a repeated name still becomes a list in document
/// order (at any depth), a child still wins over an attribute of its name, a later attribute
/// over an earlier one, and the text over both.
#[test]
fn schd_record_names_that_meet_keep_their_precedence() {
    let m = schd(
        "ADFT",
        "<FLTR><FLID>7</FLID><SODT>05MAR260905</SODT><REMK>a</REMK><remk>b</remk><REMK>c</REMK>\
           <XTRA rtno=\"1\" RTNO=\"2\" APCD=\"PEK\" TEXT=\"t\"><APCD>SHA</APCD><NOTE>x</NOTE><note>y</note>words</XTRA></FLTR>",
    );
    let Body::Schedule(s) = m.body else { panic!() };
    let fields = serde_json::to_value(&s.flights[0].fields).unwrap();
    assert_eq!(fields["REMK"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(
        fields["XTRA"],
        serde_json::json!({"RTNO": "2", "APCD": "SHA", "NOTE": ["x", "y"], "TEXT": "words"})
    );
    let names: Vec<&str> = s.flights[0].fields.iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["REMK", "SODT", "XTRA"], "in name order");
}

#[test]
fn schd_records_are_read_with_their_count_and_window_times() {
    let m = schd(
        "DNLD",
        "<RECS>2</RECS>\
         <FLTR><FLID>501</FLID><ALCD>MU</ALCD><FLNO>MU5101</FLNO><MVIN>D</MVIN><SODT>05MAR260905</SODT>\
           <ROUT RTNO=\"1\"><APCD>CTU</APCD><SCAT>05MAR261130</SCAT></ROUT><STND>212</STND>\
           <PSDT PSNO=\"1\"><PSST>212</PSST><STST>05MAR260800</STST></PSDT></FLTR>\
         <FLTR><FLID>502</FLID><FLNO>MU5102</FLNO><MVIN>A</MVIN><SODT>05mar261745</SODT>\
           <ERUT RTNO=\"1\"><APCD>CTU</APCD></ERUT><ERUT RTNO=\"2\"><APCD>SHA</APCD></ERUT></FLTR>",
    );
    assert_eq!(m.kind, MsgKind::Schd(SchdKind::Dnld));
    assert_eq!(m.kind.type_tag(), "SCHD-DNLD");
    let Body::Schedule(s) = m.body else { panic!() };
    assert_eq!(s.recs, Some(2));
    assert_eq!(s.flights.len(), 2);
    let f = &s.flights[0];
    assert_eq!((f.flid.as_deref(), f.sodt.as_deref()), (Some("501"), Some("2026-03-05T09:05")));
    let fields = serde_json::to_value(&f.fields).unwrap();
    assert_eq!(fields["STND"], serde_json::json!("212"));
    assert_eq!(
        fields["ROUT"],
        serde_json::json!([{"RTNO": "1", "APCD": "CTU", "SCAT": "2026-03-05T11:30"}]),
        "one ROUT is still a list"
    );
    assert_eq!(s.flights[1].sodt.as_deref(), Some("2026-03-05T17:45"));
    let second = serde_json::to_value(&s.flights[1].fields).unwrap();
    assert_eq!(second["ERUT"].as_array().unwrap().len(), 2);
    assert_eq!(schd("RESP", "<RECS>0</RECS>").kind, MsgKind::Schd(SchdKind::Resp));
    assert_eq!(schd("ADFT", "").kind.type_tag(), "SCHD-ADFT");
}

#[test]
fn schd_bad_sodt_is_a_codec_error() {
    let err = decode(&fixtures::other(
        9,
        "SCHD",
        "ADFT",
        "<SCHD><FLTR><FLID>1</FLID><SODT>tomorrow</SODT></FLTR></SCHD>",
    ))
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::CodecError);
    assert!(err.detail.contains("SODT of FLTR 1"), "{err}");
}

#[test]
fn schs_is_a_season_with_records_without_flid() {
    let m = decode(&fixtures::other(
        3,
        "SCHS",
        "RESP",
        "<SCHS><SNAM>Summer</SNAM><APCD>TFU</APCD><SDAT>29MAR26</SDAT><EDAT>24OCT26</EDAT><RECS>1</RECS>\
         <FLTR><ALCD>MU</ALCD><FLNO>MU5101</FLNO><MVIN>D</MVIN><STDT>29MAR26</STDT><EDDT>24OCT26</EDDT>\
           <DYOP>1234567</DYOP><SCHT>0905</SCHT><ROUT RTNO=\"1\"><APCD>SHA</APCD><SCAT>1130</SCAT></ROUT></FLTR></SCHS>",
    ))
    .unwrap();
    assert_eq!(m.kind.type_tag(), "SCHS-RESP");
    let Body::Schedule(s) = m.body else { panic!() };
    assert_eq!(s.season.as_ref().unwrap().name.as_deref(), Some("Summer"));
    let f = &s.flights[0];
    assert_eq!(f.flid, None);
    let fields = serde_json::to_value(&f.fields).unwrap();
    assert_eq!(fields["STDT"], serde_json::json!("2026-03-29"));
    assert_eq!(fields["SCHT"], serde_json::json!("0905"), "HHMM kept as written");
}

#[test]
fn reference_data_of_every_type_and_operation() {
    for (rtype, key, _) in reference::TYPES {
        for op in ["DNLD", "RESP", "ADD", "UPD", "DEL"] {
            let body = format!("<RECS>1</RECS><{rtype}><{key}>K1</{key}><NOTE>x</NOTE><EMPTY/></{rtype}>");
            let m =
                decode(&fixtures::other(1, rtype, op, &body)).unwrap_or_else(|e| panic!("{rtype}-{op}: {e}"));
            assert_eq!(m.kind.type_tag(), format!("{rtype}-{op}"));
            let Body::Reference(r) = m.body else { panic!("{rtype}-{op}") };
            assert_eq!((r.rtype.as_str(), r.op.as_str(), r.recs), (*rtype, op, Some(1)));
            assert_eq!(r.records[0].key, "K1");
            assert_eq!(r.records[0].fields["EMPTY"], serde_json::json!(""), "an empty value is a value here");
        }
    }
    assert_eq!(reference::TYPES.len(), 23);
}

#[test]
fn airline_subcompanies_nest() {
    let body = "<RECS>1</RECS><AIRL><ITOP>MU</ITOP><ONAM>Eastern</ONAM><SUBC><SCOD>SH</SCOD></SUBC><SUBC><SCOD>YN</SCOD></SUBC></AIRL>";
    let Body::Reference(r) = decode(&fixtures::other(1, "AIRL", "DNLD", body)).unwrap().body else {
        panic!()
    };
    assert_eq!(r.records[0].fields["SUBC"], serde_json::json!([{"SCOD": "SH"}, {"SCOD": "YN"}]));
}

#[test]
fn identity_is_sndr_type_styp_seqn() {
    let m = decode(&fixtures::flop_stnd(77, "1", "A1")).unwrap();
    assert_eq!(identity(&m.meta, false), "AODB|FLOP|STND|77");
    assert_eq!(identity(&m.meta, true), "AODB|FLOP|STND|77|20260101");
}

#[test]
fn ignore_rules_hit_miss_and_case() {
    let rules = ignore::IgnoreRules::new(&["LDM-*".into(), "rsta-abcd".into()]);
    let meta = |t: &str, s: &str| decode_meta(&fixtures::other(1, t, s, "")).unwrap().meta;
    assert_eq!(rules.matching(&meta("LDM", "ANY")), Some("LDM-*"));
    assert_eq!(rules.matching(&meta("ldm", "x")), Some("LDM-*"));
    assert_eq!(rules.matching(&meta("RSTA", "ABCD")), Some("rsta-abcd"));
    assert_eq!(rules.matching(&meta("RSTA", "ABCE")), None);
    assert_eq!(rules.matching(&meta("FLOP", "STND")), None);
    // ERROR is not EROR (US-04: "不混用 ERROR").
    let defaults = ignore::IgnoreRules::new(&crate::config::Config::defaults().pipeline.ignore_rules);
    assert_eq!(defaults.matching(&meta("ERROR", "X")), None);
    assert_eq!(defaults.matching(&meta("EROR", "X")), Some("EROR-*"));
    assert_eq!(
        defaults.matching(&meta("REGN", "DNLD")),
        Some("REGN-*"),
        "REGN decodes but is ignored by default"
    );
}

#[test]
fn ignored_message_with_an_unreadable_body_still_has_its_meta() {
    // decode_meta must not look at the body: an LDM body is nothing msgx can read.
    let raw = fixtures::other(3, "LDM", "XXXX", "<LDM><WHATEVER a='1'><X/></WHATEVER></LDM>");
    assert_eq!(decode_meta(&raw).unwrap().meta.msg_type, "LDM");
}

#[test]
fn report_gives_the_pumps_verdict() {
    use report::{report, Verdict};
    let rules = ignore::IgnoreRules::new(&crate::config::Config::defaults().pipeline.ignore_rules);
    let (v, j) = report(&fixtures::flop_stnd(5, "9", "A1"), &rules, &super::Rulebook::this_release(), false);
    assert_eq!(v, Verdict::Decoded { tag: "FLOP-STND".into(), supported: true });
    assert_eq!(j["identity"], "AODB|FLOP|STND|5");
    assert_eq!(j["decoded"]["records"][0]["fields"][0], serde_json::json!(["STND", "A1"]));
    let (v, _) = report(&fixtures::other(1, "LDM", "X", ""), &rules, &super::Rulebook::this_release(), false);
    assert_eq!(v, Verdict::Ignored { rule: "LDM-*".into() });
    let (v, j) = report("<MSG/>", &rules, &super::Rulebook::this_release(), false);
    assert_eq!(v, Verdict::Failed { class: ErrorClass::Malformed });
    assert_eq!(j["class"], "MALFORMED");
}

#[test]
fn a_flop_without_flop_records_is_another_vendors_message_not_for_msgx() {
    let m =
        decode(&fixtures::other(1, "FLOP", "SFGS", "<SFGS><FLID>1</FLID><PointName>x</PointName></SFGS>"))
            .unwrap();
    assert!(m.kind.not_for_us().is_some(), "{:?}", m.kind);
    assert_eq!(m.kind.type_tag(), "FLOP-SFGS");
}

#[test]
fn an_identity_longer_than_its_column_is_bounded_and_still_tells_messages_apart() {
    let meta = |sndr: String| Meta { sndr, ..decode(&fixtures::flop_stnd(7, "L", "A1")).unwrap().meta };
    let a = identity(&meta("S".repeat(300)), false);
    let b = identity(&meta(format!("{}T", "S".repeat(299))), false);
    assert!(a.chars().count() <= IDENTITY_MAX_CHARS && b.chars().count() <= IDENTITY_MAX_CHARS);
    assert_ne!(a, b, "they differ past the 200th character");
    assert_eq!(a, identity(&meta("S".repeat(300)), false), "the same message, the same key");
    assert_eq!(identity(&meta("AODB".into()), false), "AODB|FLOP|STND|7", "short keys are unchanged");
}

#[test]
fn a_body_is_refused_for_exactly_the_characters_xml_1_0_forbids_at_their_offset() {
    let allowed = [
        "\t",
        "\n",
        "\r",
        " ",
        "\u{7f}",
        "\u{85}",
        "\u{a0}",
        "中",
        "，",
        "１",
        "\u{feff}",
        "\u{fffd}",
        "\u{10000}",
    ];
    let forbidden = ["\u{0}", "\u{1}", "\u{8}", "\u{b}", "\u{c}", "\u{1f}", "\u{fffe}", "\u{ffff}"];
    for c in allowed {
        let body = format!("<MSG>a{c}b</MSG>");
        assert_eq!(text_of(body.as_bytes()).map_err(|e| e.detail), Ok(body.as_str()), "{c:?}");
    }
    for c in forbidden {
        let body = format!("<MSG>中{c}b</MSG>");
        let err = text_of(body.as_bytes()).unwrap_err();
        assert_eq!(err.class, ErrorClass::Malformed, "{c:?}");
        let code = format!("U+{:04X}", c.chars().next().unwrap() as u32);
        assert!(
            err.detail.contains(&code) && err.detail.ends_with("at byte offset 8"),
            "{c:?}: {}",
            err.detail
        );
    }
}

#[test]
fn regression_two_tuples_that_joined_to_one_identity_are_two_messages() {
    // A family-A SEQN `77|X` and a family-B SEQN 77 with MGID `X` were one key, and the
    // second was SKIPPED as a duplicate: a message lost by a text collision (#53).
    let a = Meta { seqn: "77|X".into(), ..decode(&fixtures::flop_stnd(77, "1", "A1")).unwrap().meta };
    let b = Meta { mgid: Some("X".into()), dialect: Dialect::B, ..a.clone() };
    let b = Meta { seqn: "77".into(), ..b };
    for day in [false, true] {
        assert_ne!(identity(&a, day), identity(&b, day), "day boundary {day}");
    }
    assert_eq!(identity(&a, false), "AODB|FLOP|STND|77\\|X");
    assert_eq!(identity(&b, false), "AODB|FLOP|STND|77|X");
    let slash = Meta { seqn: "77\\".into(), ..a.clone() };
    let slash_bar = Meta { sndr: "AODB\\".into(), seqn: "|77".into(), ..a.clone() };
    assert_ne!(identity(&slash, false), identity(&slash_bar, false));
    // A key with neither character is the key it always was.
    let plain = decode(&fixtures::flop_stnd(77, "1", "A1")).unwrap().meta;
    assert_eq!(identity(&plain, false), "AODB|FLOP|STND|77");
}

#[test]
fn a_shape_past_a_limit_is_protocol_naming_the_key_and_the_limit() {
    let limits = Limits { max_elements: 100, max_attributes: 10, max_unknown_names: 3 };
    let attrs: String = (0..11).map(|i| format!(" a{i}=\"1\"")).collect();
    let wide = flop_msg("STND", "7", &format!("<STND{attrs}>1</STND>"));
    let e = decode_with(&wide, &limits, &super::Rulebook::this_release()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Protocol);
    assert!(e.detail.contains("<STND> has more than 10 attributes (msgx.codec.max-attributes = 10)"), "{e}");
    let many = flop_msg("STND", "7", &"<STND>1</STND>".repeat(100));
    let e = decode_with(&many, &limits, &super::Rulebook::this_release()).unwrap_err();
    assert!(e.detail.contains("more than 100 elements (msgx.codec.max-elements = 100)"), "{e}");
    let unknown = flop_msg("STND", "7", "<STND>1</STND><XA/><XB/><XC/><XA/><XD/>");
    let e = decode_with(&unknown, &limits, &super::Rulebook::this_release()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Protocol);
    assert!(e.detail.contains("msgx.codec.max-unknown-names = 3"), "{e}");
    let three = flop_msg("STND", "7", "<STND>1</STND><XA/><XB/><XC/><XA/><XB/>");
    assert_eq!(
        decode_with(&three, &limits, &super::Rulebook::this_release()).unwrap().unknown,
        ["XA", "XB", "XC"],
        "each name once, in order"
    );
}

#[test]
fn a_duplicate_attribute_is_refused_among_few_and_among_many() {
    for n in [2usize, 8, 9, 40] {
        let attrs: String = (0..n).map(|i| format!(" a{i}=\"1\"")).collect();
        let twice = flop_msg("STND", "7", &format!("<STND{attrs} a{}=\"2\">1</STND>", n / 2));
        let e = decode(&twice).unwrap_err();
        assert_eq!(e.class, ErrorClass::Malformed, "{n}: {e}");
        assert!(e.detail.contains("appears twice"), "{n}: {e}");
        let once = flop_msg("STND", "7", &format!("<STND{attrs}>1</STND>"));
        assert!(decode(&once).is_ok(), "{n} distinct attributes");
    }
}

/// #68: the heal printed a decode error bare, and a rewritten mailbox text forged an ERROR
/// line. A decode error shows its detail through the one quoting type wherever it is printed.
#[test]
fn regression_a_decode_error_shows_its_upstream_detail_quoted_on_one_line() {
    let forged = "<MSG><META><TYPE>X\nERROR msgx::pump] dead msg_id=1</TYPE></META>";
    let e = decode(forged).unwrap_err();
    let shown = format!("{e}");
    assert!(!shown.contains('\n') && !shown.contains('\u{2028}'), "{shown}");
    assert!(shown.starts_with("MALFORMED: \""), "{shown}");
    let e = DecodeError { class: ErrorClass::CodecError, detail: "bad <X>\nERROR forged\u{2028}".into() };
    assert_eq!(format!("{e}"), r#"CODEC_ERROR: "bad <X>\nERROR forged\u{2028}""#);
}
