//! What `shmtool` does, as library functions: list the segments under `/dev/shm`,
//! report one (`inspect`, `top`, `metrics`), clean them, and read the decision log.
//! The binary (`src/bin/shmtool.rs`) parses arguments, calls these and maps an error to
//! its exit code; the text each command prints is made here too (`render`, `commands`).
//!
//! Everything here but [`clean`] and [`clean_stale`] (and the binary's `reap`, and
//! `rates` given a rate) reads only: segments are opened as observers (read-only mappings, no registration), so inspecting changes nothing,
//! and root can inspect any user's segment.

mod check;
mod commands;
mod follow;
mod list;
mod metrics;
mod render;
mod report;
mod top;

pub use crate::decisions::Mismatch;
pub use check::check;
#[cfg(feature = "cli")]
pub use commands::serve_metrics;
pub use commands::{
    FOLLOW_EVERY, LogFilter, clean_stale, list_text, rates_text, reaped_text, repaired_text,
    replay_text, write_log,
};
pub use follow::{Followed, Now};
pub use list::{Clean, HeaderInfo, Listed, clean, list, list_dir, mapped_by, read_header};
pub use metrics::prometheus;
pub use render::{clock, log_table, report_tables, top_view};
pub use report::{
    Decision, LeaseRow, LogView, PoolRow, ProcRow, RateRow, Report, SegmentInfo, TenantRow,
    decisions, liveness, replay, report,
};
pub use top::top;

use crate::Error;

/// A name as the human-readable outputs print it: a backslash, a control character
/// (a newline, a tab, an escape sequence) or another character that prints nothing
/// visible is written as its escape (`\\`, `\n`, `\u{1b}`), as Rust's `escape_debug`
/// does, and everything else as it is. Tenant names come from requests and segment
/// names from `/dev/shm`, so either may hold such characters: printed raw, a newline
/// forges a line of a table and an escape sequence drives the operator's terminal.
/// (`--json` and `metrics` escape by their own formats' rules.)
pub fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.escape_debug().any(|c| c == '\\') {
        return name.into();
    }
    // `str::escape_debug` (a combining mark is escaped only at the start, where it has
    // nothing to combine with) with its quotes unescaped: every backslash it writes
    // starts an escape, so the character after one is that escape's.
    let mut out = String::with_capacity(name.len() + 8);
    let mut it = name.escape_debug();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some(q @ ('"' | '\'')) => out.push(q),
            next => out.extend(std::iter::once(c).chain(next)),
        }
    }
    if out == name {
        return name.into(); // only quotes, which print as they are
    }
    out.into()
}

/// `shmtool`'s exit codes, which scripts may rely on. Never renumbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Done; nothing found wrong.
    Ok = 0,
    /// Done, and something was found: `check` found violated invariants, `replay`
    /// decisions that re-decide differently.
    Found = 1,
    /// The command line was wrong (clap's own code).
    Usage = 2,
    /// No segment of that name.
    NotFound = 3,
    /// The file is not a readable fairshm segment (another file, corrupt, truncated,
    /// another layout version, still being created).
    Unreadable = 4,
    /// Refused: `clean` of a segment that live processes use, without `--force`.
    InUse = 5,
    /// Permission denied, or a segment of another pid namespace that `reap` or `clean`
    /// would judge by pids that mean nothing here.
    Permission = 6,
    /// Any other failure (I/O, a busy table that `reap` could not finish).
    Failed = 7,
}

impl Exit {
    /// The exit code for a library error.
    pub fn of(e: &Error) -> Exit {
        match e {
            Error::NotFound { .. } => Exit::NotFound,
            Error::Truncated { .. }
            | Error::BadMagic { .. }
            | Error::VersionMismatch { .. }
            | Error::NotReady { .. }
            | Error::Corrupt(_)
            | Error::BadFile { .. }
            | Error::ConfigMismatch { .. } => Exit::Unreadable,
            // Names from the command line that the segment cannot have: a pool it
            // lacks (`log --pool`), a tenant name it cannot take (`rates`).
            Error::InvalidName { .. } | Error::UnknownPool { .. } | Error::InvalidTenant { .. } => {
                Exit::Usage
            }
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Exit::Permission
            }
            Error::WrongOwner { .. } | Error::ForeignPidNamespace { .. } => Exit::Permission,
            _ => Exit::Failed,
        }
    }
}

/// The exit codes, as `--help` prints them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  done, nothing found wrong
  1  found something: `check` found violated invariants, `replay` found decisions that
     re-decide differently
  2  usage: the command line was wrong (a `log --pool` the segment has no log of, a
     tenant name no tenant can have)
  3  no segment of that name
  4  not a readable fairshm segment (another file, corrupt, truncated, another layout
     version, still being created)
  5  refused: `clean` of a segment that live processes use, without --force
  6  permission denied, or a segment of another pid namespace (`reap`, `repair`, `clean`)
  7  any other failure";

#[cfg(test)]
mod shown_tests {
    use super::shown;
    use std::borrow::Cow;

    #[test]
    fn a_printable_name_is_shown_as_it_is() {
        for n in ["acme", "ünï", "a\"b'c", "e\u{301}", "g h", "日本"] {
            assert!(matches!(shown(n), Cow::Borrowed(s) if s == n), "{n:?}");
        }
    }

    #[test]
    fn control_and_invisible_characters_and_backslashes_are_escaped() {
        for (n, want) in [
            ("e\nf", r"e\nf"),
            ("tab\there", r"tab\there"),
            ("\u{1b}[31mred", r"\u{1b}[31mred"),
            ("c\\d", r"c\\d"),
            ("a\"\\'b\r", r#"a"\\'b\r"#),
            ("\u{202e}evil", r"\u{202e}evil"),
            ("\u{301}e", r"\u{301}e"),
            ("x\u{7f}", r"x\u{7f}"),
        ] {
            assert_eq!(shown(n), want, "{n:?}");
        }
    }
}
