//! Messages written for msgx's own tests and demo (the public samples carry no licence and are
//! never copied into the repository).

/// A FLOP message for one flight with the given changed elements (`None` = empty element).
pub fn flop(seqn: u64, styp: &str, flid: &str, fields: &[(&str, Option<&str>)]) -> String {
    let mut body = String::new();
    for (name, value) in fields {
        match value {
            Some(v) => body.push_str(&format!("<{name}>{v}</{name}>")),
            None => body.push_str(&format!("<{name}/>")),
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<MSG><META><SNDR>AODB</SNDR><SEQN>{seqn}</SEQN>\
         <DTTM>20260101083000</DTTM><TYPE>FLOP</TYPE><STYP>{styp}</STYP></META>\
         <FLOP><FLID>{flid}</FLID><FFID>MX-{flid}-D-01JAN260900-D</FFID>{body}</FLOP></MSG>"
    )
}

/// The next release as the tests and the simulator run it (#65): this release's rulebook plus
/// the most ordinary change a release makes — FLOP-STND also reads the vendor element `<XSTND>`,
/// which this release skips as unknown — so the decision for some input changes and the rules
/// version goes up by one. A value run beside this release, no other build; made once a
/// process (its table lives as long as the process).
pub fn next_release() -> std::sync::Arc<crate::codec::Rulebook> {
    use crate::codec::{flop::Kind, Rulebook};
    static NEXT: std::sync::OnceLock<std::sync::Arc<Rulebook>> = std::sync::OnceLock::new();
    NEXT.get_or_init(|| {
        let next = Rulebook::this_release().with_scalar("STND", "XSTND", Kind::Text);
        std::sync::Arc::new(next.expect("one more mapping"))
    })
    .clone()
}

/// A stand change (FLOP-STND) for `flid`.
pub fn flop_stnd(seqn: u64, flid: &str, stand: &str) -> String {
    flop(seqn, "STND", flid, &[("STND", Some(stand))])
}

/// A message of any TYPE/STYP with an opaque body.
pub fn other(seqn: u64, msg_type: &str, styp: &str, body: &str) -> String {
    format!(
        "<MSG><META><SNDR>AODB</SNDR><SEQN>{seqn}</SEQN><DTTM>20260101083000</DTTM>\
         <TYPE>{msg_type}</TYPE><STYP>{styp}</STYP></META>{body}</MSG>"
    )
}

/// Expected fields: name and value (`None`: cleared).
pub type Expected = &'static [(&'static str, Option<&'static str>)];

/// One message of my own per FLOP subtype: its STYP, its body, the fields it must decode to.
pub const EVERY_SUBTYPE: &[(&str, &str, Expected)] = &[
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

/// A FLOP message of `styp` for flight `flid` with `body` under `<FLOP>`.
pub fn flop_body(styp: &str, flid: &str, body: &str) -> String {
    other(
        1,
        "FLOP",
        styp,
        &format!("<FLOP><FLID>{flid}</FLID><FFID>MU-5101-A-05MAR261430-D</FFID>{body}</FLOP>"),
    )
}

/// A family-B (integration platform) message of my own: META with `DDTM`, `RCVR`, `SORC`,
/// `MGID`, `RMID`, `APOT`, then `body` under `MSG`.
pub fn platform(seqn: u64, msg_type: &str, styp: &str, body: &str) -> String {
    format!(
        "<MSG><META><SNDR>FIMS</SNDR><RCVR>MSGX</RCVR><SEQN>{seqn}</SEQN><DDTM>20260305083000</DDTM>\
         <TYPE>{msg_type}</TYPE><STYP>{styp}</STYP><SORC>FIMS</SORC><MGID>m{seqn:031}</MGID><RMID/>\
         <APOT>ZXXX</APOT></META>{body}</MSG>"
    )
}

/// A family-B flight record of my own, departing `hhmm` on 5 March 2026.
pub fn dflt(flid: &str, hhmm: &str, extra: &str) -> String {
    dflt_on(flid, "20260305", hhmm, extra)
}

/// A family-B flight record of my own, departing `hhmm` on `ymd` (`20260306`).
pub fn dflt_on(flid: &str, ymd: &str, hhmm: &str, extra: &str) -> String {
    format!(
        "<DFLT><FLID>{flid}</FLID><FFID>MU-{flid}-{ymd}{hhmm}00-D</FFID><AWCD>MU</AWCD><FLNO>{flid}</FLNO>\
         <FEXD>{ymd}</FEXD><FLIO>D</FLIO><BAPT>XXX</BAPT><CFTP>A320</CFTP><STAT/>{extra}</DFLT>"
    )
}

/// A family-B full table (DFOE-DFDL) of flights `(FLID, hhmm)` departing on `ymd`.
pub fn dfdl(seqn: u64, ymd: &str, flights: &[(&str, &str)]) -> String {
    let records: String = flights.iter().map(|(f, t)| dflt_on(f, ymd, t, "")).collect();
    platform(seqn, "DFOE", "DFDL", &format!("<RECD>{}</RECD>{records}", flights.len()))
}

/// A daily-plan snapshot (SCHD `styp`, DNLD or RESP) of flights `(FLID, ddMMMyyHHmm SODT)`.
pub fn schd(seqn: u64, styp: &str, flights: &[(&str, &str)]) -> String {
    let body: String = flights
        .iter()
        .map(|(f, sodt)| {
            format!("<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>{sodt}</SODT><STND>S{f}</STND></FLTR>")
        })
        .collect();
    other(seqn, "SCHD", styp, &format!("<SCHD><RECS>{}</RECS>{body}</SCHD>", flights.len()))
}

/// Shapes a hostile or broken upstream can give a message (#53), each about `bytes` long, and a
/// plain one of the same size (a SCHD-DNLD of many FLTR): `cargo bench --bench decode` and the
/// codec's fuzz suite hold each to a cost linear in its size.
pub mod shapes {
    /// A shape: a message of about the given size.
    pub type Shape = fn(usize) -> String;

    /// Every shape with its name; the plain one first.
    pub const ALL: [(&str, Shape); 9] = [
        ("plain SCHD-DNLD", plain),
        ("attributes on one element", many_attributes),
        ("distinct unknown elements", distinct_unknown),
        ("one unknown element repeated", repeated_unknown),
        ("long text with references", long_text),
        ("many FLOP records", many_records),
        ("nested to the depth cap", deep),
        ("wide records", wide_records),
        ("a huge element, then wide ones", huge_then_wide),
    ];

    fn meta(msg_type: &str, styp: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<MSG><META><SNDR>AODB</SNDR><SEQN>1</SEQN>\
             <DTTM>20260305010000</DTTM><TYPE>{msg_type}</TYPE><STYP>{styp}</STYP></META>"
        )
    }

    /// `head`, then `unit(0)`, `unit(1)`, … as many as fit in `bytes` with `tail` after them.
    fn fill(head: String, tail: &str, bytes: usize, unit: impl Fn(usize) -> String) -> String {
        let mut text = head;
        for i in 0.. {
            let u = unit(i);
            if text.len() + u.len() + tail.len() > bytes {
                break;
            }
            text.push_str(&u);
        }
        text.push_str(tail);
        text
    }

    /// One flight of a day's plan, as an airport sends it.
    pub fn fltr(i: usize) -> String {
        format!(
            "<FLTR><FLID>{}</FLID><ALCD>MU</ALCD><FLNO>MU{}</FLNO><MVIN>{}</MVIN><SODT>05MAR26{:02}{:02}</SODT><FLTY>J</FLTY><FLIN>D</FLIN>\
             <ROUT RTNO=\"1\"><APCD>SHA</APCD><SCAT>05MAR261130</SCAT></ROUT><ACFT>32N</ACFT><RENO>B-30EK</RENO><TRML>T2</TRML>\
             <MAXP>186</MAXP><STND>2{:02}</STND><PSDT PSNO=\"1\"><PSST>2{:02}</PSST><STST>05MAR260800</STST><STET>05MAR260950</STET></PSDT>\
             <PHAG>110009</PHAG><FHAG>110009</FHAG><MHAG>110009</MHAG><ERUT RTNO=\"1\"><APCD>CTU</APCD><SCDT>05MAR260905</SCDT></ERUT>\
             <ERUT RTNO=\"2\"><APCD>SHA</APCD><SCAT>05MAR261130</SCAT></ERUT><EXSC>SCH</EXSC><FTSS>SCH</FTSS></FLTR>",
            100_000 + i,
            5000 + i % 5000,
            if i % 2 == 0 { "D" } else { "A" },
            6 + i % 16,
            i % 60,
            i % 90,
            i % 90
        )
    }

    pub fn plain(bytes: usize) -> String {
        fill(meta("SCHD", "DNLD") + "<SCHD>", "</SCHD></MSG>", bytes, fltr)
    }

    /// A FLOP-STND whose `<FLOP>` carries attributes `A0000001="1"`, … (13 s a MiB before #53).
    pub fn many_attributes(bytes: usize) -> String {
        let text =
            fill(meta("FLOP", "STND") + "<FLOP", "", bytes.saturating_sub(60), |i| format!(" A{i:07}=\"1\""));
        text + "><FLID>7</FLID><STND>12</STND></FLOP></MSG>"
    }

    /// A FLOP-STND with empty elements of distinct unknown names (18 s a MiB before #53).
    pub fn distinct_unknown(bytes: usize) -> String {
        let head = meta("FLOP", "STND") + "<FLOP><FLID>7</FLID><STND>12</STND>";
        fill(head, "</FLOP></MSG>", bytes, |i| format!("<X{i:07}/>"))
    }

    pub fn repeated_unknown(bytes: usize) -> String {
        let head = meta("FLOP", "STND") + "<FLOP><FLID>7</FLID><STND>12</STND>";
        fill(head, "</FLOP></MSG>", bytes, |_| "<XSTND>9</XSTND>".to_string())
    }

    /// One remark, long, with character and entity references throughout.
    pub fn long_text(bytes: usize) -> String {
        let head = meta("FLOP", "REMC") + "<FLOP><FLID>7</FLID><REMC>";
        fill(head, "</REMC></FLOP></MSG>", bytes, |i| format!("gate {i} &amp; stand &#65; "))
    }

    pub fn many_records(bytes: usize) -> String {
        fill(meta("FLOP", "STND") + "", "</MSG>", bytes, |i| {
            format!("<FLOP><FLID>{i}</FLID><STND>{}</STND></FLOP>", i % 300)
        })
    }

    /// Flights whose remark nests as deep as the parser allows.
    pub fn deep(bytes: usize) -> String {
        let depth = crate::codec::MAX_DEPTH - 5;
        let nest = "<N>".repeat(depth) + "x" + &"</N>".repeat(depth);
        fill(meta("SCHD", "DNLD") + "<SCHD>", "</SCHD></MSG>", bytes, |i| {
            format!("<FLTR><FLID>{i}</FLID><SODT>05MAR261200</SODT><REMK>{nest}</REMK></FLTR>")
        })
    }

    /// Flights whose route record carries as many attributes as an element may.
    pub fn wide_records(bytes: usize) -> String {
        let attrs: String = (0..60).map(|a| format!(" B{a:02}=\"v\"")).collect();
        fill(meta("SCHD", "DNLD") + "<SCHD>", "</SCHD></MSG>", bytes, |i| {
            format!(
                "<FLTR><FLID>{i}</FLID><SODT>05MAR261200</SODT><ROUT{attrs}><APCD>SHA</APCD></ROUT></FLTR>"
            )
        })
    }

    /// Half the message one element's attributes, the rest flights with wide records: a set
    /// grown for the first must not be paid for again at each of the others.
    pub fn huge_then_wide(bytes: usize) -> String {
        let head = fill(meta("SCHD", "DNLD") + "<SCHD", "", bytes / 2, |i| format!(" Z{i:07}=\"1\""));
        let attrs: String = (0..12).map(|a| format!(" B{a:02}=\"v\"")).collect();
        fill(head + ">", "</SCHD></MSG>", bytes, |i| {
            format!(
                "<FLTR><FLID>{i}</FLID><SODT>05MAR261200</SODT><ROUT{attrs}><APCD>SHA</APCD></ROUT></FLTR>"
            )
        })
    }
}
