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
