//! What the service runs for each stream: one protocol's state machine (SotW in `sotw`,
//! Delta in `delta`), apart from the service that dispatches to them.

/// One protocol's per-stream state machine.
pub(super) trait StreamHandler: Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// Handles one request; returns the responses it calls for (often none: an ACK).
    fn on_request(&mut self, request: Self::Request) -> Vec<Self::Response>;
    /// Resources changed: returns what must be pushed.
    fn on_change(&mut self) -> Vec<Self::Response>;
}
