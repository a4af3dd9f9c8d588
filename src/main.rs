//! The `probe` binary: everything lives in the library; this only maps the outcome to an exit
//! status.

fn main() {
    std::process::exit(holprobe::cli::main_entry());
}
