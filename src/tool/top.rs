//! `shmtool top`: a refreshing view, quit with `q` or Ctrl-C.

use std::io::Write;
use std::time::Duration;

use crate::error::{Error, Result};

use super::follow::Followed;
use super::{render, report, shown};

/// The terminal of standard input in non-canonical mode without echo or signals (so
/// `q` and Ctrl-C arrive as bytes), restored on drop. `None` when stdin is no terminal.
struct RawInput {
    saved: libc::termios,
}

impl RawInput {
    fn new() -> Option<RawInput> {
        // SAFETY: `isatty` only inspects the descriptor.
        if unsafe { libc::isatty(0) } != 1 {
            return None;
        }
        // SAFETY: `termios` is plain data; all-zero is a valid value to be overwritten.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 is a terminal (checked) and `saved` is a valid, writable termios.
        if unsafe { libc::tcgetattr(0, &mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
        raw.c_cc[libc::VMIN] = 0;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: `raw` is a valid termios derived from the terminal's own.
        if unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } != 0 {
            return None;
        }
        Some(RawInput { saved })
    }

    /// Waits up to `d` for a key; `true` if it was `q`, `Q` or Ctrl-C.
    fn quit_within(&self, d: Duration) -> bool {
        let mut fd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = d.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fd` is one valid pollfd, and the count passed is 1.
        if unsafe { libc::poll(&mut fd, 1, ms) } <= 0 {
            return false;
        }
        let mut buf = [0u8; 32];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        n > 0
            && buf[..n as usize]
                .iter()
                .any(|b| matches!(b, b'q' | b'Q' | 3))
    }
}

impl Drop for RawInput {
    fn drop(&mut self) {
        // SAFETY: restores the settings read from the same terminal in `new`.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.saved) };
    }
}

/// Shows segment `name` every `every` until `q` or Ctrl-C (on a terminal), or
/// `iterations` views (`Some(1)`: once, for scripts). On a terminal each view clears the
/// screen; else views are separated by a blank line.
///
/// The view follows the name ([`Followed`]): after a deploy it shows the new segment
/// (its header says when that was created), and while no readable segment has the name
/// the view says so and the next one looks again. The first view's error is the
/// command's: a name that never named a segment is not waited for.
pub fn top(
    name: &str,
    iterations: Option<u64>,
    every: Duration,
    out: &mut dyn Write,
) -> Result<()> {
    let mut seg = Followed::open(name)?;
    let input = RawInput::new();
    let io = |source| Error::Io {
        name: name.to_owned(),
        op: "write",
        source,
    };
    let mut views = 0u64;
    loop {
        let view = match seg.current().and_then(|t| report::report(t.table())) {
            Ok(r) => render::top_view(&r),
            Err(e) if views > 0 => absent_view(name, &e),
            Err(e) => return Err(e),
        };
        if input.is_some() {
            write!(out, "\x1b[H\x1b[2J{view}").map_err(io)?;
        } else {
            if views > 0 {
                writeln!(out).map_err(io)?;
            }
            write!(out, "{view}").map_err(io)?;
        }
        out.flush().map_err(io)?;
        views += 1;
        if iterations.is_some_and(|n| views >= n) {
            return Ok(());
        }
        match &input {
            Some(i) => {
                if i.quit_within(every) {
                    return Ok(());
                }
            }
            None => std::thread::sleep(every),
        }
    }
}

/// `top`'s view while no readable segment has the name (between a deploy's clean and
/// its new create, or while the new one is being created).
fn absent_view(name: &str, e: &Error) -> String {
    format!(
        "fairshm {}: no readable segment has this name now ({}); the view resumes when one \
         has it  (q or Ctrl-C quits)\n",
        shown(name),
        shown(&e.to_string())
    )
}
