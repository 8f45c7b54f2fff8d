//! The control loops: what keeps the data plane in step with its configuration and its
//! peers while it runs. Fed by the store (every published snapshot) and feeding `lb` and
//! `proxy`: balancers rebuilt on CDS/EDS and health changes (`balancing`), outlier
//! detection's sweeps (`outlier_sweeps`), ORCA out-of-band load streams (`oob`), the overload
//! manager's monitors (`overload`), and the schedule the rebuilds keep (`schedule`).
//! `app` starts them; nothing here starts a listener.

pub mod balancing;
pub mod oob;
pub mod outlier_sweeps;
pub mod overload;
mod schedule;
