//! The journal of an [`XdsServer`](super::XdsServer): every request it received and every
//! response it sent, in order, so tests can tell an ACK from a NACK and match nonces the way
//! a control plane's operator would read its logs.

use std::collections::BTreeMap;

use crate::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

/// Which of the two ADS variants a stream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// State of the world: `StreamAggregatedResources`.
    Sotw,
    /// Incremental: `DeltaAggregatedResources`.
    Delta,
}

/// The `error_detail` of a NACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorDetail {
    pub code: i32,
    pub message: String,
}

/// One DiscoveryRequest or DeltaDiscoveryRequest as the server received it. Fields that the
/// other protocol does not have stay empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// Identifies the stream within this server (1, 2, … in order of opening).
    pub stream: u64,
    pub protocol: Protocol,
    pub type_url: String,
    /// The node id of the stream; Envoy sends the node only on the first message, so this
    /// is remembered per stream.
    pub node_id: String,
    /// SotW only: the version the client last accepted.
    pub version_info: String,
    pub response_nonce: String,
    /// SotW only.
    pub resource_names: Vec<String>,
    /// Delta only.
    pub subscribe: Vec<String>,
    /// Delta only.
    pub unsubscribe: Vec<String>,
    /// Delta only.
    pub initial_resource_versions: BTreeMap<String, String>,
    /// Set on a NACK.
    pub error_detail: Option<ErrorDetail>,
}

impl ReceivedRequest {
    pub(super) fn sotw(stream: u64, node_id: &str, request: &DiscoveryRequest) -> Self {
        ReceivedRequest {
            stream,
            protocol: Protocol::Sotw,
            type_url: request.type_url.clone(),
            node_id: node_id.to_owned(),
            version_info: request.version_info.clone(),
            response_nonce: request.response_nonce.clone(),
            resource_names: request.resource_names.clone(),
            subscribe: Vec::new(),
            unsubscribe: Vec::new(),
            initial_resource_versions: BTreeMap::new(),
            error_detail: error_detail(&request.error_detail),
        }
    }

    pub(super) fn delta(stream: u64, node_id: &str, request: &DeltaDiscoveryRequest) -> Self {
        ReceivedRequest {
            stream,
            protocol: Protocol::Delta,
            type_url: request.type_url.clone(),
            node_id: node_id.to_owned(),
            version_info: String::new(),
            response_nonce: request.response_nonce.clone(),
            resource_names: Vec::new(),
            subscribe: request.resource_names_subscribe.clone(),
            unsubscribe: request.resource_names_unsubscribe.clone(),
            initial_resource_versions: request.initial_resource_versions.clone().into_iter().collect(),
            error_detail: error_detail(&request.error_detail),
        }
    }

    /// Whether this request is an ACK of `response`: same stream, its nonce, no error, and
    /// (SotW) the version it carried.
    pub fn acks(&self, response: &SentResponse) -> bool {
        self.answers(response)
            && self.error_detail.is_none()
            && (self.protocol == Protocol::Delta || self.version_info == response.version)
    }

    /// Whether this request is a NACK of `response`.
    pub fn nacks(&self, response: &SentResponse) -> bool {
        self.answers(response) && self.error_detail.is_some()
    }

    fn answers(&self, response: &SentResponse) -> bool {
        self.stream == response.stream && self.type_url == response.type_url && self.response_nonce == response.nonce
    }
}

fn error_detail(status: &Option<crate::pb::google::rpc::Status>) -> Option<ErrorDetail> {
    status.as_ref().map(|s| ErrorDetail { code: s.code, message: s.message.clone() })
}

/// One response the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentResponse {
    pub stream: u64,
    pub protocol: Protocol,
    pub type_url: String,
    /// SotW `version_info`, or Delta `system_version_info`.
    pub version: String,
    pub nonce: String,
    /// Names of the resources carried.
    pub resources: Vec<String>,
    /// Delta only: `removed_resources`.
    pub removed: Vec<String>,
}

/// What was received and sent, in order: the most recent entries, at most the server's
/// journal limit of each kind (a long-lived server, the agent's SDS socket, must not grow
/// for ever with every reconnection); the counts of older entries let go are kept.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub requests: Vec<ReceivedRequest>,
    pub responses: Vec<SentResponse>,
    /// Requests received before `requests[0]`, no longer kept.
    pub dropped_requests: u64,
    /// Responses sent before `responses[0]`, no longer kept.
    pub dropped_responses: u64,
}

impl Journal {
    pub(super) fn push_request(&mut self, request: ReceivedRequest, limit: usize) {
        self.dropped_requests += make_room(&mut self.requests, limit);
        self.requests.push(request);
    }

    pub(super) fn push_response(&mut self, response: SentResponse, limit: usize) {
        self.dropped_responses += make_room(&mut self.responses, limit);
        self.responses.push(response);
    }

    /// The last response sent for `type_url` on any stream.
    pub fn last_response(&self, type_url: &str) -> Option<&SentResponse> {
        self.responses.iter().rev().find(|r| r.type_url == type_url)
    }

    /// Whether the last response sent for `type_url` has been ACKed.
    pub fn is_acked(&self, type_url: &str) -> bool {
        self.last_response(type_url).is_some_and(|response| self.requests.iter().any(|r| r.acks(response)))
    }

    /// Every NACK received for `type_url`.
    pub fn nacks(&self, type_url: &str) -> Vec<&ReceivedRequest> {
        self.requests.iter().filter(|r| r.type_url == type_url && r.error_detail.is_some()).collect()
    }
}

/// Makes room for one more entry under `limit` (at least one is always kept) by letting
/// the oldest quarter go at once, so that the copying is paid once per many entries;
/// returns how many went.
fn make_room<T>(entries: &mut Vec<T>, limit: usize) -> u64 {
    let limit = limit.max(1);
    if entries.len() < limit {
        return 0;
    }
    let excess = entries.len() + 1 - limit;
    let gone = excess.max(limit / 4).min(entries.len());
    entries.drain(..gone);
    gone as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(nonce: u64) -> SentResponse {
        SentResponse {
            stream: 1,
            protocol: Protocol::Sotw,
            type_url: "t".into(),
            version: nonce.to_string(),
            nonce: nonce.to_string(),
            resources: Vec::new(),
            removed: Vec::new(),
        }
    }

    #[test]
    fn the_journal_keeps_the_latest_entries_under_its_limit() {
        let mut journal = Journal::default();
        for nonce in 1..=10_000u64 {
            journal.push_response(response(nonce), 100);
            assert!(journal.responses.len() <= 100);
        }
        assert_eq!(journal.responses.last().map(|r| r.nonce.as_str()), Some("10000"));
        assert_eq!(journal.dropped_responses + journal.responses.len() as u64, 10_000);
        assert!(journal.responses.len() >= 75, "a quarter at most let go at once");
        let first = journal.dropped_responses + 1;
        assert_eq!(journal.responses[0].nonce, first.to_string(), "the oldest kept follows the last let go");
        let mut tiny = Journal::default();
        tiny.push_response(response(1), 0);
        tiny.push_response(response(2), 0);
        assert_eq!(tiny.responses.len(), 1);
        assert_eq!(tiny.responses[0].nonce, "2");
    }
}
