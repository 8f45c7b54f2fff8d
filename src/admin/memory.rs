//! `/memory` in Envoy's `envoy.admin.v3.Memory` shape (uint64 values as JSON strings).
//!
//! Envoy's numbers are tcmalloc's; Outrider's allocator is mimalloc, which reports what it
//! has committed and the process's resident size. `allocated` and `heap_size` are both the
//! committed bytes (mimalloc does not count live bytes separately), `total_physical_bytes`
//! is the resident size, and the page-heap and thread-cache figures, which mimalloc does
//! not have, are 0.

use serde_json::{Value, json};

use crate::core::allocator::Usage;

pub fn json(usage: Usage) -> Value {
    json!({
        "allocated": usage.committed.to_string(),
        "heap_size": usage.committed.to_string(),
        "pageheap_unmapped": "0",
        "pageheap_free": "0",
        "total_thread_cache": "0",
        "total_physical_bytes": usage.resident.to_string(),
    })
}
