//! All of the command line's standard output goes through here, so a closed
//! pipe (`glint inspect M --json | head -c 10`) ends the command quietly and
//! any other write error (`> /dev/full`) is one clean error, never a panic.

use std::io::Write;

/// The error text that stands for "stdout was closed by the reader"; the
/// binary exits quietly with status 0 on it.
pub const CLOSED: &str = "stdout was closed";

/// Map a write error: a closed pipe to [`CLOSED`], anything else to a
/// message naming it.
pub fn write_error(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CLOSED.to_string()
    } else {
        format!("writing the output: {e}")
    }
}

/// Write `text` to stdout and flush.
pub fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(write_error)
}

/// Write `text` and a newline to stdout and flush.
pub fn println(text: &str) -> Result<(), String> {
    print(&format!("{text}\n"))
}

/// The program's arguments as text: an argument that is not valid UTF-8 is
/// a clear error naming its place (glint's flags, prompts and file names
/// are text), not a panic.
pub fn args_text(args: impl Iterator<Item = std::ffi::OsString>) -> Result<Vec<String>, String> {
    args.enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                format!(
                    "argument {} is not valid UTF-8 ({}): glint takes its arguments, prompts and file names as UTF-8 text",
                    i + 1,
                    a.to_string_lossy()
                )
            })
        })
        .collect()
}
