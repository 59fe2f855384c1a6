//! The `glint` command line: a thin binary over `glint_cli`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Mesa's device-select Vulkan layer prints XDG_RUNTIME_DIR noise when
    // glint probes adapters; glint picks adapters itself. Set before any
    // thread exists.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match glint_cli::cli::run(&argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("glint: {e}");
            ExitCode::FAILURE
        }
    }
}
