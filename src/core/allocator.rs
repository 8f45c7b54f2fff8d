//! The process's memory allocator: mimalloc, installed by `main.rs` (the library leaves the
//! choice to its binary, so benches can wrap the allocator to count bytes).
//!
//! Chosen over the system allocator for two reasons. Its per-thread heaps suit one worker
//! thread per core with no allocator lock shared between workers. And it returns freed pages
//! to the system on request: start-up decodes Envoy's descriptor pool (several MiB) to read
//! the bootstrap and then drops it, and glibc's malloc kept those pages resident for the life
//! of an idle sidecar, which is most of what a sidecar's memory is.

/// The allocator `main.rs` installs.
pub type Global = mimalloc::MiMalloc;

/// mimalloc's option numbers (`mi_option_e` in its `mimalloc.h`) for [`configure`].
mod option {
    pub const ARENA_EAGER_COMMIT: i32 = 4;
    pub const ALLOW_LARGE_OS_PAGES: i32 = 6;
    pub const PURGE_DELAY: i32 = 15;
}

/// Sets the allocator up for a sidecar, whose memory is charged to every pod: called by a
/// constructor of the binary, before anything is allocated and before any thread starts.
/// Measured with 5 000 clusters (`bench/RESULTS.md`, "A quarter of Envoy's memory"), each
/// of these holds resident memory that a long-lived, mostly idle process never uses again:
///
/// - no transparent huge pages (`allow_large_os_pages`): mimalloc asks for them by
///   default, and a 2 MiB page stays resident while any object in it lives;
/// - arenas committed on demand, not whole (`arena_eager_commit`);
/// - freed pages returned after 1 ms instead of 10 (`purge_delay`): mimalloc purges only
///   when it runs again, and after a configuration update a sidecar may not allocate much
///   for a long time.
///
/// mimalloc's own environment variables (`MIMALLOC_ALLOW_LARGE_OS_PAGES`,
/// `MIMALLOC_ARENA_EAGER_COMMIT`, `MIMALLOC_PURGE_DELAY`) still decide when they are set.
#[allow(unsafe_code)] // foreign calls; see the SAFETY notes
pub fn configure() {
    let options: [(i32, &std::ffi::CStr, std::ffi::c_long); 3] = [
        (option::ALLOW_LARGE_OS_PAGES, c"MIMALLOC_ALLOW_LARGE_OS_PAGES", 0),
        (option::ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT", 0),
        (option::PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", 1),
    ];
    for (option, variable, value) in options {
        // SAFETY: `getenv` reads a NUL-terminated name and returns a pointer it owns, only
        // compared with null here; nothing modifies the environment before `main`. (Rust's
        // `std::env` would allocate, and nothing may be allocated before the options are set.)
        if !unsafe { libc::getenv(variable.as_ptr()) }.is_null() {
            continue;
        }
        // SAFETY: `mi_option_set` takes no pointers; it is not thread-safe, and this runs
        // before `main`, when no other thread exists.
        unsafe { libmimalloc_sys::mi_option_set(option, value) }
    }
}

/// Returns the pages freed so far to the operating system. Called once start-up is done;
/// without mimalloc as the global allocator it has nothing to release and does nothing.
#[allow(unsafe_code)] // a foreign call; see the SAFETY note
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any time;
    // it only frees memory the allocator itself holds unused.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// The allocator's view of the process's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Memory the allocator has committed (mimalloc's `current_commit`): what it holds for
    /// allocations, live or free in its pages.
    pub committed: u64,
    /// The process's resident set (mimalloc's `current_rss`).
    pub resident: u64,
}

/// The allocator's current numbers (`/memory`, `server.memory_*`).
#[allow(unsafe_code)] // a foreign call; see the SAFETY note
pub fn usage() -> Usage {
    let mut values = [0usize; 8];
    let [elapsed, user, system, rss, peak_rss, commit, peak_commit, faults] = &mut values;
    // SAFETY: every pointer is to a distinct, live, writable `usize` on this stack frame;
    // `mi_process_info` only writes through them and keeps none.
    unsafe { libmimalloc_sys::mi_process_info(elapsed, user, system, rss, peak_rss, commit, peak_commit, faults) };
    Usage { committed: values[5] as u64, resident: values[3] as u64 }
}
