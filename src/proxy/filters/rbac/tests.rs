//! The HTTP filter on requests: verdicts, stats, metadata and per-route rules.
