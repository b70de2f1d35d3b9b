//! The pairing table (docs/protocol.md section 4, rules 2, 3, 6, 7, 8): one server QP per
//! [`PairingKey`] = (HTTP peer address, identity, client GID, client QP number), shared by every
//! RDMA worker of the process. A token only ever finds pairings under its own requester's key, so
//! it can never silence, replace or use another requester's pairing (rule 9.3).
//!
//! Work on a key is serialised: [`PairingTable::checkout`] hands out a [`KeyLease`] that owns the
//! key's pairing (the QP itself, by value) until it is dropped; a second request for the same key
//! is refused at once ([`CheckoutError::KeyBusy`], 503): one client connection never has two
//! requests in flight, so waiting would only let one stuck key park every worker. A lease dropped
//! while its thread panics destroys the pairing instead of returning it. No lock is held while the lease holder calls verbs. Because a transfer returns its lease
//! only after every work request it posted has completed or flushed (or after its QP was
//! destroyed), a QP taken out of the table by a lease, an expiry or an eviction never has a work
//! request outstanding, and silencing it (ERR, then destroy) happens before any 428 is answered.
//!
//! Room (rule 4.6 with rule 9.3): a requester (peer address + identity; neither can be forged
//! over TCP with SigV4) holds at most `max_per_requester` keys. A new key of a requester at its
//! quota evicts that requester's own least recently used idle key, never another's. When the
//! whole table is full, idle keys expire first, then the least recently used idle key of the
//! requester holding the MOST keys is evicted: a flood of made-up (GID, QPN) keys from one
//! requester only ever evicts the flooder's own pairings, and a client holding fewer keys than
//! every other requester is never evicted by another requester.

use std::collections::HashMap;
// The key leases themselves (one lease per key, a retired entry looked up again) are
// hipobj_actors::keyed, which loom-tests/tests/server_pairing.rs checks; this is the policy.
use hipobj_actors::keyed::{Entries, KeyTable, Lease, Refused};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::port::{Peer, RdmaQp};
use crate::identity::Requester;
use crate::stats::Stats;

/// The pairing key of rule 4.8: who asked, and which client QP the server QP aims at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PairingKey {
    pub requester: Requester,
    pub client: Peer,
}

/// A live pairing: the server QP aimed at one client QP.
pub struct Pairing<Q> {
    /// Non-zero, random; the client echoes it in the token's LID field.
    pub id: u16,
    /// The QP's random starting PSN (sent to the client in the server token).
    pub start_psn: u32,
    pub qp: Q,
}

/// The table's entries.
type Slots<Q> = Entries<PairingKey, Pairing<Q>>;

/// Why a checkout gave no lease; both answer 503.
#[derive(Debug, PartialEq, Eq)]
pub enum CheckoutError {
    /// No idle key may be evicted to make room.
    TableFull,
    /// Another request holds this key now.
    KeyBusy,
}

/// The shared pairing table.
pub struct PairingTable<Q: RdmaQp> {
    keys: KeyTable<PairingKey, Pairing<Q>>,
    max_pairings: usize,
    max_per_requester: usize,
    idle: Duration,
    stats: Arc<Stats>,
}

impl<Q: RdmaQp> PairingTable<Q> {
    /// A table of `max_pairings` keys, at most `max_per_requester` of them per requester.
    pub fn new(
        max_pairings: usize,
        max_per_requester: usize,
        idle: Duration,
        stats: Arc<Stats>,
    ) -> Self {
        let max_pairings = max_pairings.max(1);
        PairingTable {
            keys: KeyTable::new(),
            max_pairings,
            max_per_requester: max_per_requester.clamp(1, max_pairings),
            idle,
            stats,
        }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take exclusive hold of `key`; [`CheckoutError::KeyBusy`] while another request holds it.
    /// A new key first makes room (see the module doc: the requester's own quota, then the whole
    /// table); when no idle key may be evicted, [`CheckoutError::TableFull`].
    pub fn checkout(
        &self,
        key: PairingKey,
        now: Instant,
    ) -> Result<KeyLease<'_, Q>, CheckoutError> {
        let requester = key.requester.clone();
        let mut silenced = Vec::new();
        let lease = self.keys.checkout(
            key,
            now,
            |slots| self.make_room_locked(slots, &requester, now),
            &mut silenced,
        );
        self.silence_all(silenced, "expired or evicted");
        match lease {
            Ok(lease) => Ok(KeyLease { table: self, lease }),
            Err(Refused::Busy) => Err(CheckoutError::KeyBusy),
            Err(Refused::Full) => Err(CheckoutError::TableFull),
        }
    }

    /// Exclusive hold of `key` when it is in the table and no request holds it; never adds a
    /// key or makes room (used to drop a pairing after an answer that replaces the client's QP).
    pub fn lease_existing(&self, key: &PairingKey) -> Option<KeyLease<'_, Q>> {
        let lease = self.keys.lease_existing(key)?;
        Some(KeyLease { table: self, lease })
    }

    /// Room for one more key of `requester`: `Ok(pairings to silence)`, or `Err(pairings to
    /// silence)` when no room can be made (everything evictable is in use).
    fn make_room_locked(
        &self,
        slots: &mut Slots<Q>,
        requester: &Requester,
        now: Instant,
    ) -> Result<Vec<Pairing<Q>>, Vec<Pairing<Q>>> {
        let mut out = Vec::new();
        let own = |slots: &Slots<Q>| slots.keys().filter(|k| k.requester == *requester).count();
        let over_quota = own(slots) >= self.max_per_requester;
        if over_quota || slots.len() >= self.max_pairings {
            out.extend(self.expire_locked(slots, now));
        }
        if own(slots) >= self.max_per_requester {
            match self.evict_locked(slots, Victim::OwnOf(requester)) {
                Some(p) => out.extend(p),
                None => return Err(out),
            }
        }
        if slots.len() >= self.max_pairings {
            match self.evict_locked(slots, Victim::HeaviestRequester) {
                Some(p) => out.extend(p),
                None => return Err(out),
            }
        }
        Ok(out)
    }

    /// Destroy every pairing idle longer than the idle time (and not in use). Returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let expired = self
            .keys
            .with_entries(|slots| self.expire_locked(slots, now));
        let n = expired.len();
        self.silence_all(expired, "expired");
        n
    }

    fn expire_locked(&self, slots: &mut Slots<Q>, now: Instant) -> Vec<Pairing<Q>> {
        let mut out = Vec::new();
        slots.retain(|key, slot| {
            let mut state = slot.lock();
            let idle_for = now.saturating_duration_since(state.last_used);
            if state.busy || idle_for < self.idle {
                return true;
            }
            state.retired = true;
            if let Some(p) = state.value.take() {
                debug!(
                    qpn = key.client.qp_num,
                    pairing = p.id,
                    ?idle_for,
                    "pairing expired"
                );
                Stats::bump(&self.stats.pairings_expired);
                out.push(p);
            }
            false
        });
        out
    }

    /// Take the chosen idle key out of the table: `None` when no key of that kind is idle,
    /// `Some(its pairing, if it had one)` otherwise.
    fn evict_locked(&self, slots: &mut Slots<Q>, victim: Victim<'_>) -> Option<Option<Pairing<Q>>> {
        let mut held: HashMap<&Requester, usize> = HashMap::new();
        if matches!(victim, Victim::HeaviestRequester) {
            for key in slots.keys() {
                *held.entry(&key.requester).or_default() += 1;
            }
        }
        // Most keys held first, then least recently used.
        let mut best: Option<((usize, std::cmp::Reverse<u64>), &PairingKey)> = None;
        for (key, slot) in slots.iter() {
            if let Victim::OwnOf(r) = victim {
                if key.requester != *r {
                    continue;
                }
            }
            let state = slot.lock();
            if state.busy {
                continue;
            }
            let held_by_owner = held.get(&key.requester).copied().unwrap_or(0);
            let rank = (held_by_owner, std::cmp::Reverse(state.use_seq));
            if best.as_ref().is_none_or(|(r, _)| rank > *r) {
                best = Some((rank, key));
            }
        }
        let key = best?.1.clone();
        let slot = slots.remove(&key)?;
        let mut state = slot.lock();
        state.retired = true;
        let pairing = state.value.take();
        if let Some(p) = &pairing {
            debug!(
                qpn = key.client.qp_num,
                pairing = p.id,
                peer = %key.requester.peer_ip,
                identity = %key.requester.identity,
                "pairing evicted (table or quota full)"
            );
            Stats::bump(&self.stats.pairings_evicted);
        }
        Some(pairing)
    }

    fn silence_all(&self, pairings: Vec<Pairing<Q>>, why: &str) {
        for p in pairings {
            self.silence(p, why);
        }
    }

    /// Move the QP to ERR and destroy it (the table guarantees none of its work requests is
    /// outstanding: see the module doc).
    fn silence(&self, mut p: Pairing<Q>, why: &str) {
        if let Err(e) = p.qp.to_error() {
            warn!(qpn = p.qp.qp_num(), error = %e, "moving a retired QP to ERR failed; destroying it");
        }
        debug!(
            qpn = p.qp.qp_num(),
            pairing = p.id,
            why,
            "server QP destroyed"
        );
        Stats::sub(&self.stats.pairings_live, 1);
        drop(p);
    }
}

/// Which idle key [`PairingTable::evict_locked`] takes.
#[derive(Clone, Copy)]
enum Victim<'a> {
    /// The least recently used key of this requester (it is at its quota).
    OwnOf(&'a Requester),
    /// The least recently used key of the requester holding the most keys (table full).
    HeaviestRequester,
}

/// Exclusive hold of one key; returns the pairing to the table when dropped (or retires the
/// key when it holds none).
pub struct KeyLease<'t, Q: RdmaQp> {
    table: &'t PairingTable<Q>,
    lease: Lease<'t, PairingKey, Pairing<Q>>,
}

impl<Q: RdmaQp> KeyLease<'_, Q> {
    /// The client QP this key's server QP aims at.
    pub fn peer(&self) -> Peer {
        self.lease.key().client
    }

    pub fn key(&self) -> &PairingKey {
        self.lease.key()
    }

    pub fn pairing(&self) -> Option<&Pairing<Q>> {
        self.lease.value()
    }

    pub fn pairing_mut(&mut self) -> Option<&mut Pairing<Q>> {
        self.lease.value_mut()
    }

    /// Silence and destroy the key's pairing, if any (before a re-pairing, or after a failure).
    pub fn destroy_pairing(&mut self, why: &str) {
        if let Some(p) = self.lease.take() {
            self.table.silence(p, why);
        }
    }

    /// Store a new pairing; an old one is silenced first.
    pub fn install(&mut self, pairing: Pairing<Q>) {
        self.destroy_pairing("replaced");
        Stats::add(&self.table.stats.pairings_live, 1);
        self.lease.put(pairing);
    }
}

impl<Q: RdmaQp> Drop for KeyLease<'_, Q> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The holder panicked, maybe mid-transfer: its QP may have work requests posted and
            // its state is unknown. Silence it; the key leaves the table (next request: 428).
            self.destroy_pairing("the request panicked");
        }
        // Then the inner lease returns the pairing, or retires the key without one.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::rdma::port::{QpSetup, RdmaPort};
    use crate::rdma::test_double::{DoublePort, QpLog};
    use std::net::IpAddr;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;

    fn peer(n: u32) -> Peer {
        Peer {
            gid: [7; 16],
            qp_num: n,
        }
    }

    fn requester(ip: [u8; 4], identity: &str) -> Requester {
        Requester::new(IpAddr::from(ip), Identity::new(identity))
    }

    /// Key `n` of the usual client.
    fn key(n: u32) -> PairingKey {
        key_of(&requester([10, 0, 0, 1], "alice"), n)
    }

    fn key_of(r: &Requester, n: u32) -> PairingKey {
        PairingKey {
            requester: r.clone(),
            client: peer(n),
        }
    }

    fn pair(
        port: &DoublePort,
        table: &PairingTable<<DoublePort as RdmaPort>::Qp>,
        n: u32,
        id: u16,
    ) {
        pair_key(port, table, key(n), id);
    }

    fn pair_key(
        port: &DoublePort,
        table: &PairingTable<<DoublePort as RdmaPort>::Qp>,
        key: PairingKey,
        id: u16,
    ) {
        let n = key.client.qp_num;
        let mut lease = table.checkout(key, Instant::now()).expect("room");
        let qp = port
            .connect_qp(&QpSetup {
                peer: peer(n),
                start_psn: 1,
                max_send_wr: 4,
            })
            .expect("qp");
        lease.install(Pairing {
            id,
            start_psn: 1,
            qp,
        });
    }

    #[test]
    fn lease_returns_pairing_and_empty_lease_retires_key() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(4, 4, Duration::from_secs(60), stats.clone());
        pair(&port, &table, 1, 11);
        assert_eq!(table.len(), 1);
        {
            let lease = table.checkout(key(1), Instant::now()).expect("room");
            assert_eq!(lease.pairing().map(|p| p.id), Some(11));
        }
        {
            // A lease that ends without a pairing takes its key out of the table.
            let lease = table.checkout(key(2), Instant::now()).expect("room");
            assert!(lease.pairing().is_none());
        }
        assert_eq!(table.len(), 1);
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn replacing_a_pairing_silences_the_old_qp_first() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, 4, Duration::from_secs(60), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let old_qpn = {
            let lease = table.checkout(key(1), Instant::now()).expect("room");
            lease.pairing().map(|p| p.qp.qp_num()).expect("paired")
        };
        let mut lease = table.checkout(key(1), Instant::now()).expect("room");
        lease.destroy_pairing("replaced");
        // The old QP went to ERR and was destroyed before the new one was even created.
        let log = port.log();
        assert!(log.contains(&QpLog::ToError(old_qpn)));
        assert!(log.contains(&QpLog::Destroyed(old_qpn)));
        let qp = port
            .connect_qp(&QpSetup {
                peer: peer(1),
                start_psn: 2,
                max_send_wr: 4,
            })
            .expect("qp");
        let new_qpn = qp.qp_num();
        lease.install(Pairing {
            id: 12,
            start_psn: 2,
            qp,
        });
        let log = port.log();
        let destroyed_at = log.iter().position(|e| *e == QpLog::Destroyed(old_qpn));
        let created_at = log.iter().position(|e| *e == QpLog::Created(new_qpn));
        assert!(destroyed_at < created_at, "{log:?}");
    }

    #[test]
    fn idle_pairings_expire_and_their_qps_are_destroyed() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(8, 8, Duration::from_secs(10), stats.clone());
        pair(&port, &table, 1, 11);
        let qpn = table
            .checkout(key(1), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.qp.qp_num());
        let qpn = qpn.expect("paired");
        assert_eq!(table.expire(Instant::now()), 0);
        assert_eq!(table.expire(Instant::now() + Duration::from_secs(11)), 1);
        assert!(table.is_empty());
        assert!(port.log().contains(&QpLog::Destroyed(qpn)));
        assert_eq!(stats.pairings_expired.load(Ordering::Relaxed), 1);
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 0);
        // The client's next request finds no pairing.
        assert!(table
            .checkout(key(1), Instant::now())
            .expect("room")
            .pairing()
            .is_none());
    }

    #[test]
    fn a_pairing_in_use_does_not_expire() {
        let port = DoublePort::new();
        let table = PairingTable::new(8, 8, Duration::from_secs(10), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let lease = table.checkout(key(1), Instant::now()).expect("room");
        assert_eq!(table.expire(Instant::now() + Duration::from_secs(60)), 0);
        drop(lease);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn full_table_evicts_least_recently_used() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(2, 2, Duration::from_secs(600), stats.clone());
        pair(&port, &table, 1, 11);
        pair(&port, &table, 2, 12);
        // Touch 1, so 2 is the least recently used.
        drop(table.checkout(key(1), Instant::now()).expect("room"));
        let qpn2 = table
            .checkout(key(2), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.qp.qp_num());
        // ... and touch 1 again after 2.
        drop(table.checkout(key(1), Instant::now()).expect("room"));
        pair(&port, &table, 3, 13);
        assert_eq!(table.len(), 2);
        assert_eq!(stats.pairings_evicted.load(Ordering::Relaxed), 1);
        assert!(port
            .log()
            .contains(&QpLog::Destroyed(qpn2.expect("paired"))));
        assert!(table
            .checkout(key(1), Instant::now())
            .expect("room")
            .pairing()
            .is_some());
    }

    #[test]
    fn full_table_of_busy_pairings_is_table_full() {
        let port = DoublePort::new();
        let table = PairingTable::new(1, 1, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let _busy = table.checkout(key(1), Instant::now()).expect("room");
        assert_eq!(
            table.checkout(key(2), Instant::now()).err(),
            Some(CheckoutError::TableFull)
        );
    }

    #[test]
    fn requests_for_one_key_are_serialised() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, 4, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let inside = AtomicUsize::new(0);
        let max_inside = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let lease = loop {
                            match table.checkout(key(1), Instant::now()) {
                                Ok(lease) => break lease,
                                Err(CheckoutError::KeyBusy) => std::thread::yield_now(),
                                Err(e) => panic!("{e:?}"),
                            }
                        };
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max_inside.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(lease);
                    }
                });
            }
        });
        assert_eq!(max_inside.load(Ordering::SeqCst), 1);
        assert_eq!(table.len(), 1);
    }

    fn pairing_id(
        table: &PairingTable<<DoublePort as RdmaPort>::Qp>,
        key: &PairingKey,
    ) -> Option<u16> {
        table
            .checkout(key.clone(), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.id)
    }

    #[test]
    fn key_includes_peer_address_and_identity() {
        let port = DoublePort::new();
        let table = PairingTable::new(16, 16, Duration::from_secs(600), Arc::new(Stats::default()));
        let victim = requester([10, 0, 0, 1], "alice");
        pair_key(&port, &table, key_of(&victim, 7), 11);
        // The same client QP (GID, QPN) asked for from another address or by another identity
        // is another key: it finds no pairing, and the victim's is untouched.
        for other in [
            requester([10, 0, 0, 9], "alice"),
            requester([10, 0, 0, 1], "mallory"),
        ] {
            let mut lease = table
                .checkout(key_of(&other, 7), Instant::now())
                .expect("room");
            assert!(lease.pairing().is_none(), "{other:?} sees no pairing");
            // What a re-pairing does first: silence the key's old QP (there is none).
            lease.destroy_pairing("superseded by a new pairing");
        }
        assert!(port
            .log()
            .iter()
            .all(|e| !matches!(e, QpLog::ToError(_) | QpLog::Destroyed(_))));
        assert_eq!(pairing_id(&table, &key_of(&victim, 7)), Some(11));
    }

    #[test]
    fn a_flood_of_made_up_keys_evicts_only_the_flooders_own_pairings() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(8, 4, Duration::from_secs(600), stats.clone());
        let victim = requester([10, 0, 0, 1], "alice");
        pair_key(&port, &table, key_of(&victim, 1), 11);
        pair_key(&port, &table, key_of(&victim, 2), 12);
        let victim_qpns: Vec<u32> = port
            .log()
            .iter()
            .filter_map(|e| match e {
                QpLog::Created(q) => Some(*q),
                _ => None,
            })
            .collect();
        // One attacker (one address, one identity) pairs 100 made-up client QPs, the victim's
        // QP numbers included.
        let mallory = requester([10, 0, 0, 66], "mallory");
        for n in 0..100 {
            pair_key(&port, &table, key_of(&mallory, n), 100 + n as u16);
        }
        assert_eq!(table.len(), 2 + 4, "the flooder holds its quota, no more");
        assert_eq!(stats.pairings_evicted.load(Ordering::Relaxed), 96);
        for q in victim_qpns {
            assert!(
                !port.log().contains(&QpLog::Destroyed(q)),
                "victim QP {q} destroyed"
            );
        }
        assert_eq!(pairing_id(&table, &key_of(&victim, 1)), Some(11));
        assert_eq!(pairing_id(&table, &key_of(&victim, 2)), Some(12));
    }

    #[test]
    fn a_full_table_evicts_from_the_requester_holding_the_most() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(8, 4, Duration::from_secs(600), stats.clone());
        let victim = requester([10, 0, 0, 1], "alice");
        pair_key(&port, &table, key_of(&victim, 1), 11);
        // Two flooders from other addresses fill the rest of the table and go on.
        for (i, ip) in [[10, 0, 0, 7], [10, 0, 0, 8]].into_iter().enumerate() {
            let r = requester(ip, "mallory");
            for n in 0..10 {
                pair_key(
                    &port,
                    &table,
                    key_of(&r, n),
                    (200 + 10 * i + n as usize) as u16,
                );
            }
        }
        assert_eq!(table.len(), 8);
        assert_eq!(pairing_id(&table, &key_of(&victim, 1)), Some(11));
        // The victim's next new key takes the place of a flooder's, not of its own.
        pair_key(&port, &table, key_of(&victim, 2), 12);
        assert_eq!(pairing_id(&table, &key_of(&victim, 1)), Some(11));
        assert_eq!(pairing_id(&table, &key_of(&victim, 2)), Some(12));
        assert_eq!(table.len(), 8);
    }
    #[test]
    fn a_busy_key_is_refused_at_once_and_free_again_after_release() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, 4, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let held = table.checkout(key(1), Instant::now()).expect("room");
        assert_eq!(
            table.checkout(key(1), Instant::now()).err(),
            Some(CheckoutError::KeyBusy)
        );
        // Other keys are not affected.
        assert!(table.checkout(key(2), Instant::now()).is_ok());
        drop(held);
        let again = table.checkout(key(1), Instant::now()).expect("free again");
        assert_eq!(again.pairing().map(|p| p.id), Some(11));
    }

    #[test]
    fn a_lease_dropped_by_a_panic_destroys_its_pairing() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(4, 4, Duration::from_secs(600), stats.clone());
        pair(&port, &table, 1, 11);
        let qpn = table
            .checkout(key(1), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.qp.qp_num())
            .expect("paired");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _lease = table.checkout(key(1), Instant::now()).expect("room");
            panic!("scripted panic while holding the key");
        }));
        assert!(r.is_err());
        let log = port.log();
        assert!(log.contains(&QpLog::ToError(qpn)) && log.contains(&QpLog::Destroyed(qpn)));
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 0);
        // The key is free and unpaired: the client's next request pairs again.
        assert!(table
            .checkout(key(1), Instant::now())
            .expect("free")
            .pairing()
            .is_none());
    }
}
