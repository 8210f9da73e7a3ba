use super::*;
use crate::fixtures;

#[test]
fn decodes_meta_and_a_flop_record() {
    let raw = fixtures::flop(42, "stnd", "1001", &[("STND", Some("A12")), ("REMC", None)]);
    let m = decode(&raw).unwrap();
    assert_eq!(m.meta.sndr, "AODB");
    assert_eq!(m.meta.seqn, "42");
    assert_eq!(m.meta.dttm, "20260101083000");
    assert_eq!(m.meta.msg_type, "FLOP");
    assert_eq!(m.meta.styp, "STND", "codes are upper-cased");
    assert_eq!(m.kind, MsgKind::Flop("STND".into()));
    assert_eq!(m.kind.type_tag(), "FLOP-STND");
    let Body::Flop(recs) = m.body else { panic!("not a FLOP body") };
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].flid, "1001");
    assert_eq!(recs[0].ffid.as_deref(), Some("MX-1001-D-01JAN260900-D"));
    assert_eq!(
        recs[0].fields,
        vec![("STND".to_string(), Some("A12".to_string())), ("REMC".to_string(), None)]
    );
}

#[test]
fn tolerates_ddtm_rcvr_and_lower_case_codes() {
    let raw = "<MSG><META><SNDR>AODB</SNDR><RCVR>MSGX</RCVR><SEQN>7</SEQN><DDTM>20260101000000</DDTM>\
               <TYPE>flop</TYPE><STYP>Stnd</STYP></META><FLOP><FLID>9</FLID><STND>B1</STND></FLOP></MSG>";
    let m = decode(raw).unwrap();
    assert_eq!(m.meta.dttm, "20260101000000");
    assert_eq!(m.kind.type_tag(), "FLOP-STND");
}

#[test]
fn flop_repeats_per_flight() {
    let raw =
        "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META>\
               <FLOP><FLID>1</FLID><STND>A1</STND></FLOP><FLOP><FLID>2</FLID><STND>A2</STND></FLOP></MSG>";
    let Body::Flop(recs) = decode(raw).unwrap().body else { panic!() };
    let flids: Vec<_> = recs.iter().map(|r| r.flid.as_str()).collect();
    assert_eq!(flids, ["1", "2"]);
}

#[test]
fn malformed_cases() {
    let no_meta = "<MSG><FLOP><FLID>1</FLID></FLOP></MSG>";
    let no_seqn = "<MSG><META><SNDR>A</SNDR><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>X</STYP></META></MSG>";
    let no_flid = "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>X</STYP></META><FLOP><STND>1</STND></FLOP></MSG>";
    let no_record =
        "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>X</STYP></META></MSG>";
    for (raw, words) in [
        ("", "empty"),
        ("   ", "empty"),
        ("not xml at all", "root"),
        ("<MSG><META>", "not closed"),
        ("<ROOT/>", "not <MSG>"),
        (no_meta, "no <META>"),
        (no_seqn, "<SEQN>"),
        (no_flid, "<FLID>"),
        (no_record, "no <FLOP>"),
    ] {
        let err = decode(raw).unwrap_err();
        assert_eq!(err.class, ErrorClass::Malformed, "{raw:?}: {err}");
        assert!(err.detail.contains(words), "{raw:?}: {err} should mention {words:?}");
    }
}

#[test]
fn unknown_type_is_unsupported_never_malformed() {
    let m = decode(&fixtures::other(1, "XYZW", "ABCD", "<XYZW><ANY>1</ANY></XYZW>")).unwrap();
    assert_eq!(m.kind, MsgKind::Unsupported { msg_type: "XYZW".into(), styp: "ABCD".into() });
    assert_eq!(m.kind.type_tag(), "XYZW-ABCD");
    assert_eq!(m.body, Body::Unread);
}

#[test]
fn nested_flop_elements_are_codec_errors_until_their_table_exists() {
    let raw = fixtures::flop(1, "GTDT", "5", &[("GTDT", Some("<GATE>G1</GATE>"))]);
    let err = decode(&raw).unwrap_err();
    assert_eq!(err.class, ErrorClass::CodecError, "{err}");
}

#[test]
fn identity_is_sndr_type_styp_seqn() {
    let m = decode(&fixtures::flop_stnd(77, "1", "A1")).unwrap();
    assert_eq!(identity(&m.meta, false), "AODB|FLOP|STND|77");
    assert_eq!(identity(&m.meta, true), "AODB|FLOP|STND|77|20260101");
}

#[test]
fn ignore_rules_match_type_styp_or_type_star_case_insensitively() {
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
}

#[test]
fn ignored_message_with_an_unreadable_body_still_has_its_meta() {
    // decode_meta must not look at the body: an LDM body is nothing msgx can read.
    let raw = fixtures::other(3, "LDM", "XXXX", "<LDM><WHATEVER a='1'><X/></WHATEVER></LDM>");
    assert_eq!(decode_meta(&raw).unwrap().meta.msg_type, "LDM");
}
