//! Who made a request (docs/protocol.md rules 9.1 and 4.8): the peer address of its HTTP connection
//! and its identity (the SigV4 access key, or `anonymous`). A [`Requester`] is what the pairing
//! table keys on besides the client QP, so one requester's token can never name, silence or use
//! another requester's pairing.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub use crate::credentials::ANONYMOUS;

/// An identity: an access key of the credentials table, or [`ANONYMOUS`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity(Arc<str>);

impl Identity {
    pub fn new(name: &str) -> Self {
        Identity(Arc::from(name))
    }

    pub fn anonymous() -> Self {
        Identity::new(ANONYMOUS)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The peer address of the HTTP connection a request came on, put in the request's
/// extensions by the accept loop (s3s hands extensions through to the access check and the
/// operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpPeer(pub IpAddr);

impl HttpPeer {
    pub fn of(addr: SocketAddr) -> Self {
        HttpPeer(normalize_ip(addr.ip()))
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a dual-stack listener reports IPv4 peers)
/// is the IPv4 address `a.b.c.d`; every other address is itself.
pub fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Who made a request: pairings, quotas and bucket ownership are per requester / identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requester {
    /// The HTTP connection's peer address, normalised by [`normalize_ip`].
    pub peer_ip: IpAddr,
    pub identity: Identity,
}

impl Requester {
    pub fn new(peer_ip: IpAddr, identity: Identity) -> Self {
        Requester {
            peer_ip: normalize_ip(peer_ip),
            identity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn ipv4_mapped_peers_are_their_ipv4_address() {
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped());
        assert_eq!(normalize_ip(mapped), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(
            Requester::new(mapped, Identity::new("a")),
            Requester::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), Identity::new("a"))
        );
        let v6 = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));
        assert_eq!(normalize_ip(v6), v6);
        assert_eq!(
            HttpPeer::of(SocketAddr::new(mapped, 80)).0,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))
        );
    }
}
