//! The `probe` binary: everything lives in the library; this only maps the outcome to an exit
//! status.

fn main() {
    fixed_mmap_threshold();
    std::process::exit(holprobe::cli::main_entry());
}

/// glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so
/// after the first run.json checkpoint (a buffer of a few hundred KB to 2 MB, every 5 s) such
/// blocks come from the main heap, which they fragment: measured on 10-minute observe runs,
/// the main heap held 3.2 MB resident against 0.87 MB with a fixed threshold, and an hours-long
/// watch would creep. A fixed threshold keeps every block of 128 KiB or more in a mapping of
/// its own, given back to the system when freed (the writer's values always were: they pass
/// 32 MiB, or are allocated once).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fixed_mmap_threshold() {
    // SAFETY: mallopt only sets an allocator parameter; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Other C libraries: their allocator's own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fixed_mmap_threshold() {}
