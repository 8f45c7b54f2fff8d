//! What to do when the ADS stream ends with a gRPC status, and the status a NACK sends.

use tonic::Code;

use crate::pb::google::rpc::Status;

/// A NACK's `error_detail`: Envoy sends `INTERNAL` with the message.
pub fn nack_status(message: String) -> Status {
    Status { code: Code::Internal as i32, message, details: Vec::new() }
}

/// The client's reaction to a stream that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Transient: reconnect after a backoff and resume with the versions held.
    Retry,
    /// The control plane will never accept this client as configured (it does not serve
    /// ADS, or refuses this identity or request). Reconnecting cannot help: stop, log, and
    /// keep serving the last good configuration.
    GiveUp,
}

/// Sorts a status code into [`Recovery`]. Envoy retries every failure forever; Outrider
/// does too except where a retry can only fail the same way.
pub fn recovery(code: Code) -> Recovery {
    match code {
        Code::Unimplemented | Code::InvalidArgument | Code::Unauthenticated | Code::PermissionDenied => {
            Recovery::GiveUp
        }
        Code::Ok
        | Code::Cancelled
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::NotFound
        | Code::AlreadyExists
        | Code::ResourceExhausted
        | Code::FailedPrecondition
        | Code::Aborted
        | Code::OutOfRange
        | Code::Internal
        | Code::Unavailable
        | Code::DataLoss => Recovery::Retry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_classified() {
        use Recovery::*;
        let table = [
            (Code::Ok, Retry), // the server closed the stream: reconnect
            (Code::Cancelled, Retry),
            (Code::Unknown, Retry),
            (Code::InvalidArgument, GiveUp),
            (Code::DeadlineExceeded, Retry),
            (Code::NotFound, Retry),
            (Code::AlreadyExists, Retry),
            (Code::PermissionDenied, GiveUp),
            (Code::ResourceExhausted, Retry),
            (Code::FailedPrecondition, Retry),
            (Code::Aborted, Retry),
            (Code::OutOfRange, Retry),
            (Code::Unimplemented, GiveUp),
            (Code::Internal, Retry),
            (Code::Unavailable, Retry),
            (Code::DataLoss, Retry),
            (Code::Unauthenticated, GiveUp),
        ];
        for (code, expected) in table {
            assert_eq!(recovery(code), expected, "{code:?}");
        }
    }
}
