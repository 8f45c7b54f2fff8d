//! (Placeholder.)
