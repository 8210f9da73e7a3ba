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

/// Expected fields: name and value (`None`: cleared).
type Expected = &'static [(&'static str, Option<&'static str>)];

/// One message of my own per FLOP subtype: its STYP, its body, the fields it must decode to.
const EVERY_SUBTYPE: &[(&str, &str, Expected)] = &[
    ("ABTM", "<ABTM ASNO=\"2\"><ABDG>B12</ABDG><ABOP>D</ABOP><AOTM>05MAR261512</AOTM></ABTM><ABTM ASNO=\"1\"><ABDG>B11</ABDG><ABOP>A</ABOP><AOTM>05MAR261431</AOTM></ABTM>",
        &[("ABTM", Some(r#"[{"ABDG":"B11","ABOP":"A","AOTM":"2026-03-05T14:31","ASNO":"1"},{"ABDG":"B12","ABOP":"D","AOTM":"2026-03-05T15:12","ASNO":"2"}]"#))]),
    ("ACFT", "<ACFT>32N</ACFT>", &[("ACFT", Some("32N"))]),
    ("APPT", "<APPT>05MAR261440</APPT>", &[("APPT", Some("2026-03-05T14:40"))]),
    ("BOTM", "<BOTM>05MAR261350</BOTM>", &[("BOTM", Some("2026-03-05T13:50"))]),
    ("CHDT", "<CHDT CHNO=\"1\"><CHUT>C03</CHUT><CCLS>Y</CCLS><PCBT>05MAR261200</PCBT><PCET>05MAR261330</PCET><CTYP>D</CTYP></CHDT>",
        &[("CHDT", Some(r#"[{"CCLS":"Y","CHNO":"1","CHUT":"C03","CTYP":"D","PCBT":"2026-03-05T12:00","PCET":"2026-03-05T13:30"}]"#))]),
    ("CHOT", "<CHOT CSNO=\"1\"><CHTM>05MAR261436</CHTM><CHID>ON</CHID><CHST>212</CHST></CHOT>",
        &[("CHOT", Some(r#"[{"CHID":"ON","CHST":"212","CHTM":"2026-03-05T14:36","CSNO":"1"}]"#))]),
    ("CKDT", "<CKDT CKNO=\"1\"><CHKC>K21</CHKC><PCOT>05MAR261130</PCOT><PCCT>05MAR261355</PCCT><CTYP>D</CTYP></CKDT>",
        &[("CKDT", Some(r#"[{"CHKC":"K21","CKNO":"1","CTYP":"D","PCCT":"2026-03-05T13:55","PCOT":"2026-03-05T11:30"}]"#))]),
    ("CLDT", "<CLDT CLNO=\"1\"><BELT>7</BELT><FBAG>05MAR261450</FBAG><LBAG>05MAR261512</LBAG></CLDT>",
        &[("CLDT", Some(r#"[{"BELT":"7","CLNO":"1","FBAG":"2026-03-05T14:50","LBAG":"2026-03-05T15:12"}]"#))]),
    ("CNCL", "<CNCL>05MAR260812</CNCL>", &[("CNCL", Some("2026-03-05T08:12"))]),
    ("COBT", "<COBT>05MAR261405</COBT>", &[("COBT", Some("2026-03-05T14:05"))]),
    ("CTOT", "<CTOT>05MAR261420</CTOT>", &[("CTOT", Some("2026-03-05T14:20"))]),
    ("DELY", "<DELY CODE=\"93\" STRT=\"05MAR261400\" DURA=\"0045\">late inbound aircraft</DELY><DELY CODE=\"71\" STRT=\"05MAR261445\" DURA=\"0010\">weather</DELY>",
        &[("DELY", Some(r#"[{"CODE":"93","DURA":"0045","REASON":"late inbound aircraft","STRT":"2026-03-05T14:00"},{"CODE":"71","DURA":"0010","REASON":"weather","STRT":"2026-03-05T14:45"}]"#))]),
    ("EGSR", "<EGSR>05MAR261408</EGSR>", &[("EGSR", Some("2026-03-05T14:08"))]),
    ("EGST", "<EGST>05MAR261410</EGST>", &[("EGST", Some("2026-03-05T14:10"))]),
    ("EOBT", "<EOBT>05MAR261400</EOBT>", &[("EOBT", Some("2026-03-05T14:00"))]),
    ("ERUT", "<ERUT RTNO=\"1\"><APCD>SHA</APCD><SCDT>05MAR261400</SCDT></ERUT><ERUT RTNO=\"2\"><APCD>CTU</APCD><SCAT>05MAR261705</SCAT><SADC>0</SADC></ERUT>",
        &[("ERUT", Some(r#"[{"APCD":"SHA","RTNO":"1","SCDT":"2026-03-05T14:00"},{"APCD":"CTU","RTNO":"2","SADC":"0","SCAT":"2026-03-05T17:05"}]"#))]),
    ("EXSS", "<EXSC>BOR</EXSC><EXSR>boarding</EXSR>", &[("EXSC", Some("BOR")), ("EXSR", Some("boarding"))]),
    ("FDIV", "<FDIV DDES=\"PVG\" DDIR=\"TO\">fog at destination</FDIV>",
        &[("FDIV", Some(r#"{"DDES":"PVG","DDIR":"TO","REASON":"fog at destination"}"#))]),
    ("FINT", "<FINT>05MAR261702</FINT>", &[("FINT", Some("2026-03-05T17:02"))]),
    ("FLAB", "<FLAB ARES=\"WX\">wind shear</FLAB>", &[("FLAB", Some(r#"{"ARES":"WX","REASON":"wind shear"}"#))]),
    ("FLIN", "<FLIN>I</FLIN>", &[("FLIN", Some("I"))]),
    ("FLTY", "<FLTY>J</FLTY>", &[("FLTY", Some("J"))]),
    ("FRET", "<FRET REID=\"TECH\">hydraulic warning</FRET>", &[("FRET", Some(r#"{"REASON":"hydraulic warning","REID":"TECH"}"#))]),
    ("FTSS", "<FTSS>DEP</FTSS>", &[("FTSS", Some("DEP"))]),
    ("GTDT", "<GTDT GTNO=\"1\"><GATE>G28</GATE><PGOT>05MAR261320</PGOT><PGCT>05MAR261350</PGCT><GTYP>D</GTYP></GTDT>",
        &[("GTDT", Some(r#"[{"GATE":"G28","GTNO":"1","GTYP":"D","PGCT":"2026-03-05T13:50","PGOT":"2026-03-05T13:20"}]"#))]),
    ("HNAG", "<FHAG>110009</FHAG><PHAG>110010</PHAG><MHAG>110011</MHAG>",
        &[("FHAG", Some("110009")), ("PHAG", Some("110010")), ("MHAG", Some("110011"))]),
    ("IEST", "<IEST>05MAR261655</IEST>", &[("IEST", Some("2026-03-05T16:55"))]),
    ("LACL", "<LACL>05MAR261345</LACL>", &[("LACL", Some("2026-03-05T13:45"))]),
    ("MAXP", "<MAXP> 186 </MAXP>", &[("MAXP", Some("186"))]),
    ("NAAT", "<NAAT>05MAR261811</NAAT>", &[("NAAT", Some("2026-03-05T18:11"))]),
    ("NEAT", "<NEAT>05MAR261805</NEAT>", &[("NEAT", Some("2026-03-05T18:05"))]),
    ("PADT", "<PADT>05MAR261102</PADT>", &[("PADT", Some("2026-03-05T11:02"))]),
    ("PEDT", "<PEDT>05MAR261100</PEDT>", &[("PEDT", Some("2026-03-05T11:00"))]),
    ("PORT", "<PORT><POTM>05MAR261438</POTM><POID>O</POID></PORT><PORT><POTM>05MAR261402</POTM><POID>C</POID></PORT>",
        &[("PORT", Some(r#"[{"POID":"O","POTM":"2026-03-05T14:38"},{"POID":"C","POTM":"2026-03-05T14:02"}]"#))]),
    ("PSDT", "<PSDT PSNO=\"1\"><PSST>212</PSST><STST>05MAR261200</STST><STET>05MAR261410</STET></PSDT>",
        &[("PSDT", Some(r#"[{"PSNO":"1","PSST":"212","STET":"2026-03-05T14:10","STST":"2026-03-05T12:00"}]"#))]),
    ("PSHT", "<PSHT PSHN=\"1\"><PSTM>05MAR261404</PSTM><PSID>P</PSID><PUST>212</PUST></PSHT>",
        &[("PSHT", Some(r#"[{"PSHN":"1","PSID":"P","PSTM":"2026-03-05T14:04","PUST":"212"}]"#))]),
    ("REMC", "<REMC>VIP on board, 航班备注</REMC>", &[("REMC", Some("VIP on board, 航班备注"))]),
    ("RENO", "<RENO>B-30EK</RENO>", &[("RENO", Some("B-30EK"))]),
    ("RUNW", "<RUNW>02L</RUNW>", &[("RUNW", Some("02L"))]),
    ("SRVT", "<SRVT><SRTC>WCHR</SRTC><SRQT>2</SRQT><SRST>05MAR261300</SRST></SRVT>",
        &[("SRVT", Some(r#"[{"SRQT":"2","SRST":"2026-03-05T13:00","SRTC":"WCHR"}]"#))]),
    ("STND", "<STND>212</STND>", &[("STND", Some("212"))]),
    ("TAOP", "<TAOP>MU</TAOP><TAFL>MU5102</TAFL><TAID>88231</TAID>",
        &[("TAOP", Some("MU")), ("TAFL", Some("MU5102")), ("TAID", Some("88231"))]),
    ("TIPT", "<TIPT><TRTM>05MAR261401</TRTM><TRST>212</TRST></TIPT>", &[("TIPT", Some(r#"[{"TRST":"212","TRTM":"2026-03-05T14:01"}]"#))]),
    ("TOBT", "<TOBT>05MAR261400</TOBT>", &[("TOBT", Some("2026-03-05T14:00"))]),
    ("TRML", "<TRML>T2</TRML>", &[("TRML", Some("T2"))]),
    ("VIPF", "<VIPF><VPCD>V001</VPCD><VFES>Y</VFES><VIPT>1</VIPT></VIPF>", &[("VIPF", Some(r#"[{"VFES":"Y","VIPT":"1","VPCD":"V001"}]"#))]),
    ("VIPP", "<VIPP>3</VIPP><VIPR>A</VIPR>", &[("VIPP", Some("3")), ("VIPR", Some("A"))]),
    ("ESTT", "<ESTT>05MAR261650</ESTT>", &[("ESTT", Some("2026-03-05T16:50"))]),
    ("ACTT", "<ACTT>05MAR261707</ACTT>", &[("ACTT", Some("2026-03-05T17:07"))]),
];

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
        let err = decode(&flop_msg(styp, "77", body)).unwrap_err();
        assert_eq!(err.class, ErrorClass::CodecError, "FLOP-{styp} {body}: {err}");
        assert!(err.detail.contains(words), "{:?} should contain {words:?}", err.detail);
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
        let m = decode(&fixtures::other(1, t, s, "<ANY a='1'><THING/></ANY>")).unwrap();
        assert!(matches!(m.kind, MsgKind::Unsupported { .. }), "{t}-{s}");
        assert_eq!(m.kind.type_tag(), tag);
        assert_eq!(m.body, Body::Unread);
    }
}

fn schd(styp: &str, body: &str) -> Message {
    decode(&fixtures::other(9, "SCHD", styp, &format!("<SCHD>{body}</SCHD>"))).unwrap()
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
    assert_eq!(f.fields["STND"], serde_json::json!("212"));
    assert_eq!(
        f.fields["ROUT"],
        serde_json::json!([{"RTNO": "1", "APCD": "CTU", "SCAT": "2026-03-05T11:30"}]),
        "one ROUT is still a list"
    );
    assert_eq!(s.flights[1].sodt.as_deref(), Some("2026-03-05T17:45"));
    assert_eq!(s.flights[1].fields["ERUT"].as_array().unwrap().len(), 2);
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
    assert_eq!(f.fields["STDT"], serde_json::json!("2026-03-29"));
    assert_eq!(f.fields["SCHT"], serde_json::json!("0905"), "HHMM kept as written");
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
    let (v, j) = report(&fixtures::flop_stnd(5, "9", "A1"), &rules, false);
    assert_eq!(v, Verdict::Decoded { tag: "FLOP-STND".into(), supported: true });
    assert_eq!(j["identity"], "AODB|FLOP|STND|5");
    assert_eq!(j["decoded"]["records"][0]["fields"][0], serde_json::json!(["STND", "A1"]));
    let (v, _) = report(&fixtures::other(1, "LDM", "X", ""), &rules, false);
    assert_eq!(v, Verdict::Ignored { rule: "LDM-*".into() });
    let (v, j) = report("<MSG/>", &rules, false);
    assert_eq!(v, Verdict::Failed { class: ErrorClass::Malformed });
    assert_eq!(j["class"], "MALFORMED");
}
