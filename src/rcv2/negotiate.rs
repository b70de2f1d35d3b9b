//! Which RC protocol a client speaks to an endpoint (docs/protocol.md 10.1), for clients that own
//! their HTTP (the command line, the Python package): the decision after each answer, and what
//! each endpoint was found to speak, remembered for the session.
//!
//! ```text
//! choice auto, endpoint unknown or v1:  v1 request (sections 1-9)
//!     501 + x-amz-rdma-protocol-status: unsupported  -> PREPARE instead; remember v2
//!     501 without the marker                         -> no RDMA here (HTTP if allowed)
//!     anything else                                  -> the answer stands; remember v1
//! choice auto, endpoint v2; or choice v2:           PREPARE (hipobj-rc-v2)
//!     501 (with the marker or not)                   -> no RDMA here (HTTP if allowed)
//!     anything else                                  -> the answer stands
//! choice v1:                                        v1 request, never switched
//!     501                                            -> no RDMA here (HTTP if allowed)
//! ```

use super::MAX_TRANSFER;
use hipobj_actors::sync::Mutex;
use std::collections::HashMap;
use std::fmt;

/// The environment variable of the explicit choice (`v1`, `v2`, `auto`).
pub const ENV: &str = "HIPOBJ_RDMA_PROTOCOL";

/// One of the two RC protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Sections 1-9: one round trip, connections paired once and reused.
    V1,
    /// hipobj-rc-v2 (section 10): PREPARE and READY, a QP per transfer.
    V2,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V1 => "v1",
            Protocol::V2 => "v2",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller's choice: a fixed protocol, or negotiation (`Auto`, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    #[default]
    Auto,
    V1,
    V2,
}

impl Choice {
    /// `v1`, `v2` or `auto` (any case, surrounding spaces ignored).
    pub fn parse(value: &str) -> Result<Choice, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Choice::Auto),
            "v1" => Ok(Choice::V1),
            "v2" => Ok(Choice::V2),
            other => Err(format!(
                "RDMA protocol '{}': expected v1, v2 or auto",
                other.escape_debug()
            )),
        }
    }

    /// `HIPOBJ_RDMA_PROTOCOL`, `Auto` when unset or empty; a bad value is an error.
    pub fn from_env() -> Result<Choice, String> {
        match std::env::var(ENV) {
            Ok(v) if !v.trim().is_empty() => Choice::parse(&v).map_err(|e| format!("{ENV}: {e}")),
            _ => Ok(Choice::Auto),
        }
    }
}

/// What to do after an RDMA request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The answer stands: the transfer's own success or error.
    Done,
    /// The endpoint speaks hipobj-rc-v2 only: send PREPARE instead (and remember it).
    SwitchToV2,
    /// No RDMA at this endpoint for this request: plain HTTP if the caller allowed it, else the
    /// error.
    NoRdma,
}

/// The decision after a request of `protocol` under `choice` was answered `status`
/// (`unsupported`: the answer carried `x-amz-rdma-protocol-status: unsupported`, see
/// [`super::is_unsupported`]). `status` is None when no answer was seen (the request failed on
/// the way): the transfer's error stands.
pub fn decide(choice: Choice, protocol: Protocol, status: Option<u16>, unsupported: bool) -> Next {
    match (protocol, status) {
        (Protocol::V1, Some(501)) if unsupported && choice == Choice::Auto => Next::SwitchToV2,
        (_, Some(501)) => Next::NoRdma,
        _ => Next::Done,
    }
}

/// The choice and what each endpoint was found to speak, for one session (thread-safe).
#[derive(Debug, Default)]
pub struct Negotiation {
    choice: Choice,
    spoken: Mutex<HashMap<String, Protocol>>,
}

impl Negotiation {
    pub fn new(choice: Choice) -> Negotiation {
        Negotiation {
            choice,
            spoken: Mutex::new(HashMap::new()),
        }
    }

    pub fn choice(&self) -> Choice {
        self.choice
    }

    /// The protocol of the first request of a transfer to `endpoint`.
    pub fn first(&self, endpoint: &str) -> Protocol {
        match self.choice {
            Choice::V1 => Protocol::V1,
            Choice::V2 => Protocol::V2,
            Choice::Auto => self.spoken(endpoint).unwrap_or(Protocol::V1),
        }
    }

    /// What `endpoint` was found to speak, if a transfer found out.
    pub fn spoken(&self, endpoint: &str) -> Option<Protocol> {
        self.spoken.lock().get(endpoint).copied()
    }

    /// Record the answer to a request of `protocol` to `endpoint` and say what to do next.
    pub fn answered(
        &self,
        endpoint: &str,
        protocol: Protocol,
        status: Option<u16>,
        unsupported: bool,
    ) -> Next {
        let next = decide(self.choice, protocol, status, unsupported);
        let learned = match (next, status) {
            (Next::SwitchToV2, _) => Some(Protocol::V2),
            (Next::Done, Some(_)) => Some(protocol),
            _ => None,
        };
        if let Some(p) = learned {
            let mut spoken = self.spoken.lock();
            if spoken.insert(endpoint.to_owned(), p) != Some(p) {
                tracing::info!(endpoint, protocol = %p, "RDMA protocol of the endpoint");
            }
        }
        next
    }

    /// The most bytes one transfer to `endpoint` may move: [`MAX_TRANSFER`] when it may use
    /// hipobj-rc-v2 (known to, chosen, or not yet known under `Auto`), else None.
    pub fn max_transfer(&self, endpoint: &str) -> Option<u64> {
        let v2 = match self.choice {
            Choice::V1 => false,
            Choice::V2 => true,
            Choice::Auto => self.spoken(endpoint) != Some(Protocol::V1),
        };
        v2.then_some(MAX_TRANSFER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Protocol::{V1, V2};

    #[test]
    fn a_v1_answer_of_501_with_the_marker_switches_only_under_auto() {
        assert_eq!(decide(Choice::Auto, V1, Some(501), true), Next::SwitchToV2);
        assert_eq!(decide(Choice::V1, V1, Some(501), true), Next::NoRdma);
    }

    #[test]
    fn a_501_without_the_marker_means_no_rdma() {
        for choice in [Choice::Auto, Choice::V1, Choice::V2] {
            assert_eq!(decide(choice, V1, Some(501), false), Next::NoRdma);
            assert_eq!(decide(choice, V2, Some(501), false), Next::NoRdma);
        }
    }

    #[test]
    fn a_prepare_answered_501_with_the_marker_means_no_rdma() {
        assert_eq!(decide(Choice::Auto, V2, Some(501), true), Next::NoRdma);
        assert_eq!(decide(Choice::V2, V2, Some(501), true), Next::NoRdma);
    }

    #[test]
    fn other_answers_stand() {
        for status in [
            Some(200),
            Some(206),
            Some(403),
            Some(404),
            Some(428),
            Some(503),
            None,
        ] {
            for p in [V1, V2] {
                assert_eq!(decide(Choice::Auto, p, status, false), Next::Done);
                // the marker only counts on a 501
                assert_eq!(decide(Choice::Auto, p, status, true), Next::Done);
            }
        }
    }

    #[test]
    fn the_endpoint_protocol_is_remembered_per_endpoint() {
        let n = Negotiation::new(Choice::Auto);
        assert_eq!(n.first("http://a"), V1);
        assert_eq!(
            n.answered("http://a", V1, Some(501), true),
            Next::SwitchToV2
        );
        assert_eq!(n.first("http://a"), V2);
        assert_eq!(n.first("http://b"), V1, "another endpoint is not affected");
        assert_eq!(n.answered("http://b", V1, Some(200), false), Next::Done);
        assert_eq!(n.spoken("http://b"), Some(V1));
        // a failure on the way (no answer) teaches nothing
        assert_eq!(n.answered("http://c", V1, None, false), Next::Done);
        assert_eq!(n.spoken("http://c"), None);
        // no RDMA: not remembered as a protocol
        assert_eq!(n.answered("http://d", V1, Some(501), false), Next::NoRdma);
        assert_eq!(n.spoken("http://d"), None);
    }

    #[test]
    fn an_explicit_choice_overrides_what_was_learned() {
        for (choice, want) in [(Choice::V1, V1), (Choice::V2, V2)] {
            let n = Negotiation::new(choice);
            n.answered("http://a", V1, Some(501), true);
            assert_eq!(n.first("http://a"), want);
        }
    }

    #[test]
    fn v2_caps_the_transfer_size() {
        let n = Negotiation::new(Choice::Auto);
        assert_eq!(n.max_transfer("http://a"), Some(MAX_TRANSFER));
        n.answered("http://a", V1, Some(200), false);
        assert_eq!(n.max_transfer("http://a"), None);
        assert_eq!(Negotiation::new(Choice::V1).max_transfer("x"), None);
        assert_eq!(
            Negotiation::new(Choice::V2).max_transfer("x"),
            Some(MAX_TRANSFER)
        );
    }

    #[test]
    fn choices_parse() {
        assert_eq!(Choice::parse(" V2 "), Ok(Choice::V2));
        assert_eq!(Choice::parse("auto"), Ok(Choice::Auto));
        assert!(Choice::parse("v3").is_err());
        assert!(Choice::parse("").is_err());
    }
}
