//! The `glint` command line: a thin binary over `glint_cli`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Mesa's device-select Vulkan layer prints XDG_RUNTIME_DIR noise when
    // glint probes adapters; glint picks adapters itself. Set before any
    // thread exists.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    let argv = glint_cli::cli::output::args_text(std::env::args_os().skip(1));
    match argv.and_then(|argv| glint_cli::cli::run(&argv)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader closed the pipe: it has what it wanted.
        Err(e) if e == glint_cli::cli::output::CLOSED => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("glint: {e}");
            ExitCode::FAILURE
        }
    }
}
