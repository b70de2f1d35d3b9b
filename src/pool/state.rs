//! What a connection's QP is to the protocol: its pairing, the state tokens are minted from and
//! `200` replies are checked against, and how a request's window ends.

use crate::token::{Token, Transport};

/// How a request's window ends (docs/protocol.md 9.8, 11.2), from its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowEnd {
    /// A `200` announced the server's SEND_WITH_INV.
    Announced,
    /// No transfer failed at the server: it sent no SEND_WITH_INV, or one that completed before
    /// it answered (a revision-4 server waits for the SEND's completion, which the client NIC
    /// acknowledges after the receive completed), so the receive's completion is already there
    /// when the reply is read. `428`, a refusal before any transfer, a `200` without the flag,
    /// or an error after a successful transfer (a `400 BadDigest` or `507` of the commit).
    Settled,
    /// A transfer may have failed after the SEND_WITH_INV was posted, which the NIC may still
    /// execute: a `500`, a `507` (the disk filled during the transfer), a gateway's 5xx, or no
    /// reply seen.
    Unknown,
}

impl WindowEnd {
    /// The window's end after a reply with status `code` that announced no SEND_WITH_INV
    /// (`-1`: no reply was seen). Only the server's failed transfers answer `500` or `507`
    /// (a `5xx` of a gateway in between may hide them); `501` and `503` refuse before any
    /// transfer.
    pub fn of_code(code: i32) -> WindowEnd {
        match code {
            501 | 503 => WindowEnd::Settled,
            c if !(0..500).contains(&c) => WindowEnd::Unknown,
            _ => WindowEnd::Settled,
        }
    }
}
/// What pairing did with a `428` reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairOutcome {
    /// The never-paired QP is now paired with the server QP: send the request again.
    Paired,
    /// The QP was already paired (the server forgot it, or it is another server): it was replaced by a
    /// fresh QP; send the request again so the server pairs the fresh one.
    Replaced,
}

/// The pairing a connection's QP has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pairing {
    pub server_qp_num: u32,
    pub pairing_id: u16,
}

/// A plain copy of what a connection is to the protocol: everything a token and a `200` check
/// need. Read from the connection by whoever owns it ([`super::Connection::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnState {
    pub qp_num: u32,
    pub gid: [u8; 16],
    pub port: u8,
    pub pairing: Option<Pairing>,
    /// The QP keeps zero-length receives posted: its tokens ask for remote invalidation.
    pub remote_inv: bool,
}

impl ConnState {
    /// The token for `length` bytes at `remote_addr` reachable with `rkey` (0: nothing).
    pub fn token(&self, rkey: u32, remote_addr: u64, length: u64) -> Token {
        Token {
            transport: Transport::Rc,
            qp_num: self.qp_num,
            gid: self.gid,
            rkey,
            remote_addr,
            length,
            port: self.port,
            lid: self.pairing.map_or(0, |p| p.pairing_id),
        }
        .with_remote_inv(self.remote_inv)
    }

    /// Rule 5.4: does a `200:<server token>` name this pairing?
    pub fn matches(&self, server: &Token) -> bool {
        self.pairing
            .is_some_and(|p| p.server_qp_num == server.qp_num && p.pairing_id == server.lid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which replies may follow a SEND_WITH_INV the NIC still executes (the window is then
    /// fenced, never invalidated locally, when its receive is not there yet).
    #[test]
    fn only_failed_transfers_and_lost_replies_leave_the_window_unknown() {
        for code in [500, 502, 504, 507, -1] {
            assert_eq!(WindowEnd::of_code(code), WindowEnd::Unknown, "{code}");
        }
        for code in [200, 204, 206, 400, 403, 404, 412, 416, 428, 501, 503] {
            assert_eq!(WindowEnd::of_code(code), WindowEnd::Settled, "{code}");
        }
    }

    #[test]
    fn conn_state_mints_and_checks() {
        let unpaired = ConnState {
            qp_num: 0x12,
            gid: [7; 16],
            port: 1,
            pairing: None,
            remote_inv: false,
        };
        let t = unpaired.token(0, 0x1000, 4096);
        assert_eq!((t.qp_num, t.rkey, t.lid, t.port), (0x12, 0, 0, 1));
        assert_eq!((t.remote_addr, t.length, t.gid), (0x1000, 4096, [7; 16]));
        let server = Token {
            qp_num: 0x99,
            lid: 5,
            ..t
        };
        assert!(
            !unpaired.matches(&server),
            "an unpaired connection matches nothing"
        );
        let paired = ConnState {
            pairing: Some(Pairing {
                server_qp_num: 0x99,
                pairing_id: 5,
            }),
            ..unpaired
        };
        assert_eq!(paired.token(0xabcd, 0, 1).lid, 5);
        assert_eq!(paired.token(0xabcd, 0, 1).rkey, 0xabcd);
        assert!(paired.matches(&server));
        assert!(!paired.token(0xabcd, 0, 1).remote_inv());
        let receiving = ConnState {
            remote_inv: true,
            ..paired
        };
        let flagged = receiving.token(0xabcd, 0, 1);
        assert!(
            flagged.remote_inv(),
            "a QP with receives posted asks for remote invalidation"
        );
        assert_eq!(flagged.port_number(), 1);
        assert!(receiving.matches(&server));
        assert!(!paired.matches(&Token { lid: 6, ..server }));
        assert!(!paired.matches(&Token {
            qp_num: 0x98,
            ..server
        }));
    }
}
