//! The process's exit codes, in one place (docs/reference.md, "Commands and exit codes"; the
//! man page's EXIT STATUS). `msgx status --check` answers in the Nagios plugin convention
//! instead (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN: [`crate::health`]).

use std::process::ExitCode;

/// How `msgx` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success; `run`: stopped on a signal after finishing the rounds in hand.
    Ok,
    /// A stage failed, or this instance is stale (PRE-5); a command's work was refused in part.
    Failed,
    /// Usage or configuration error (the message names the key).
    Usage,
    /// Own PostgreSQL's schema is not this binary's (pending, changed or unknown migrations).
    Schema,
    /// A store the command needs is unreachable or refused it.
    Unreachable,
    /// A store forgot what it acknowledged and msgx cannot prove how to heal it.
    Forgot,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Schema => 3,
            Exit::Unreachable => 4,
            // 5 is retired: a second `msgx run` waits as a hot standby instead of exiting.
            Exit::Forgot => 6,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_code_is_documented_with_its_number() {
        let reference = include_str!("../docs/reference.md");
        for e in [Exit::Ok, Exit::Failed, Exit::Usage, Exit::Schema, Exit::Unreachable, Exit::Forgot] {
            let row = format!("\n| {} |", e.code());
            assert!(
                reference.contains(&row),
                "docs/reference.md has no exit-code row for {e:?} ({})",
                e.code()
            );
        }
    }
}
