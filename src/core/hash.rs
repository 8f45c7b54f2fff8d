//! Hash maps of the request path: keyed by names and addresses that come from the
//! configuration, looked up on every request of a worker. foldhash (the hasher of
//! hashbrown) in place of std's SipHash: a cluster name hashes in a few nanoseconds
//! instead of tens, and its per-process random seed still keeps the layout unpredictable.

/// A `HashMap` with foldhash's seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
