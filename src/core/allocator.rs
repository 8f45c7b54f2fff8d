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
