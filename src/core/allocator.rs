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

/// Returns the pages freed so far to the operating system. Called once start-up is done;
/// without mimalloc as the global allocator it has nothing to release and does nothing.
#[allow(unsafe_code)] // the one foreign call of the crate; see the SAFETY note
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
