//! MySQL/MariaDB errors → [`StoreErrorKind`] (SPEC §4.9), one table.
//!
//! Unavailable: no answer (I/O errors, a broken packet stream, connect and read timeouts),
//! and the answers of a server that cannot serve right now — too many connections (1040),
//! shutting down (1053), lock wait timeout (1205), deadlock (1213), query interrupted or
//! connection killed (1317, 1927), out of memory or disk (1037, 1038, 1041, 1021, 1114),
//! network read/write errors (1158–1161), read-only mode (1290, 1836), statement timeouts
//! (1969, 3024), "gone away" and "lost connection" (2006, 2013) — and a database, table or
//! column that is not there (1049, 1146, 1054: the mailbox is away or misconfigured, no
//! message is at fault). Rejected: everything else the server answers — a value too long
//! (1406), an invalid string (1366), duplicates and constraints (1062, 1452, 1048), a command
//! denied (1142, 1143) — a value the driver cannot convert, and every code this table does
//! not know.

use crate::error::Store;
use mysql::{DriverError, Error};

use crate::error::{StoreError, StoreErrorKind};

const UNAVAILABLE_CODES: &[u16] = &[
    1021, 1037, 1038, 1040, 1041, 1049, 1053, 1054, 1114, 1146, 1158, 1159, 1160, 1161, 1205, 1213, 1290,
    1317, 1836, 1927, 1969, 2006, 2013, 3024,
];

/// The kind of a server error by its code.
pub fn kind_of_code(code: u16) -> StoreErrorKind {
    if UNAVAILABLE_CODES.contains(&code) {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Rejected
    }
}

pub fn classify(e: &Error) -> StoreError {
    let kind = match e {
        Error::IoError(_) | Error::CodecError(_) => StoreErrorKind::Unavailable,
        Error::MySqlError(m) => kind_of_code(m.code),
        Error::DriverError(
            DriverError::ConnectTimeout
            | DriverError::CouldNotConnect(_)
            | DriverError::Timeout
            | DriverError::PacketOutOfSync
            | DriverError::UnexpectedPacket
            | DriverError::SetupError,
        ) => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Rejected,
    };
    StoreError::new(Store::Mailbox, kind, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use StoreErrorKind::{Rejected, Unavailable};

    #[test]
    fn server_codes_case_by_case() {
        let cases = [
            (1040, Unavailable, "too many connections"),
            (1053, Unavailable, "server shutdown in progress"),
            (1205, Unavailable, "lock wait timeout"),
            (1213, Unavailable, "deadlock"),
            (1317, Unavailable, "query interrupted"),
            (1927, Unavailable, "connection killed"),
            (2006, Unavailable, "server has gone away"),
            (2013, Unavailable, "lost connection during query"),
            (1290, Unavailable, "read-only"),
            (1969, Unavailable, "max_statement_time exceeded"),
            (1146, Unavailable, "table does not exist (renamed away)"),
            (1054, Unavailable, "unknown column (misconfigured)"),
            (1049, Unavailable, "unknown database"),
            (1406, Rejected, "data too long"),
            (1366, Rejected, "incorrect string value"),
            (1062, Rejected, "duplicate entry"),
            (1048, Rejected, "column cannot be null"),
            (1142, Rejected, "command denied"),
            (1064, Rejected, "syntax error"),
            (4242, Rejected, "a code nobody knows"),
        ];
        for (code, kind, what) in cases {
            assert_eq!(kind_of_code(code), kind, "{code} {what}");
        }
    }

    #[test]
    fn driver_errors() {
        let io = Error::IoError(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        assert_eq!(classify(&io).kind, Unavailable);
        assert_eq!(classify(&Error::DriverError(DriverError::ConnectTimeout)).kind, Unavailable);
        assert_eq!(
            classify(&Error::DriverError(DriverError::PacketTooLarge)).kind,
            Rejected,
            "max_allowed_packet"
        );
        assert_eq!(classify(&Error::FromValueError(mysql::Value::NULL)).kind, Rejected);
    }

    #[test]
    fn a_real_connection_refusal_is_unavailable() {
        let opts = mysql::OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(1)
            .tcp_connect_timeout(Some(std::time::Duration::from_millis(200)));
        let e = mysql::Conn::new(opts).unwrap_err();
        assert_eq!(classify(&e).kind, Unavailable, "{e}");
    }
}
