//! The pairing table (PROTOCOL.md section 4, rules 2, 3, 6, 7): one server QP per client QP,
//! keyed by (client GID, client QP number), shared by every RDMA worker of the process.
//!
//! Work on a key is serialised: [`PairingTable::checkout`] hands out a [`KeyLease`] that owns the
//! key's pairing (the QP itself, by value) until it is dropped; a second request for the same key
//! is refused at once ([`CheckoutError::KeyBusy`], 503): one client connection never has two
//! requests in flight, so waiting would only let one stuck key park every worker. A lease dropped
//! while its thread panics destroys the pairing instead of returning it. No lock is held while the lease holder calls verbs. Because a transfer returns its lease
//! only after every work request it posted has completed or flushed (or after its QP was
//! destroyed), a QP taken out of the table by a lease, an expiry or an eviction never has a work
//! request outstanding, and silencing it (ERR, then destroy) happens before any 428 is answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::port::{Peer, RdmaQp};
use crate::stats::Stats;

/// A live pairing: the server QP aimed at one client QP.
pub struct Pairing<Q> {
    /// Non-zero, random; the client echoes it in the token's LID field.
    pub id: u16,
    /// The QP's random starting PSN (sent to the client in the server token).
    pub start_psn: u32,
    pub qp: Q,
}

struct SlotState<Q> {
    /// A lease holds this key.
    busy: bool,
    /// Removed from the table; a later checkout must look the key up again.
    retired: bool,
    pairing: Option<Pairing<Q>>,
    last_used: Instant,
    /// Logical time of the last release, for least-recently-used eviction.
    use_seq: u64,
}

struct Slot<Q> {
    state: Mutex<SlotState<Q>>,
}

/// Why a checkout gave no lease; both answer 503.
#[derive(Debug, PartialEq, Eq)]
pub enum CheckoutError {
    /// The table is full of pairings that are all in use.
    TableFull,
    /// Another request holds this key now.
    KeyBusy,
}

/// The shared pairing table.
pub struct PairingTable<Q: RdmaQp> {
    slots: Mutex<HashMap<Peer, Arc<Slot<Q>>>>,
    max_pairings: usize,
    idle: Duration,
    clock: AtomicU64,
    stats: Arc<Stats>,
}

/// Poison-free lock: a panic elsewhere must not take the table down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<Q: RdmaQp> PairingTable<Q> {
    pub fn new(max_pairings: usize, idle: Duration, stats: Arc<Stats>) -> Self {
        PairingTable {
            slots: Mutex::new(HashMap::new()),
            max_pairings: max_pairings.max(1),
            idle,
            clock: AtomicU64::new(0),
            stats,
        }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take exclusive hold of `peer`'s key; [`CheckoutError::KeyBusy`] while another request
    /// holds it. A key not yet in a full table first expires idle pairings, then evicts the least
    /// recently used one not in use; when every pairing is in use, [`CheckoutError::TableFull`].
    pub fn checkout(&self, peer: Peer, now: Instant) -> Result<KeyLease<'_, Q>, CheckoutError> {
        loop {
            let mut silenced = Vec::new();
            let slot = {
                let mut slots = lock(&self.slots);
                match slots.get(&peer) {
                    Some(slot) => Arc::clone(slot),
                    None => {
                        if slots.len() >= self.max_pairings {
                            silenced.extend(self.expire_locked(&mut slots, now));
                        }
                        if slots.len() >= self.max_pairings {
                            match self.evict_lru_locked(&mut slots) {
                                Some(p) => silenced.push(p),
                                None => {
                                    drop(slots);
                                    self.silence_all(silenced, "expired");
                                    return Err(CheckoutError::TableFull);
                                }
                            }
                        }
                        let slot = Arc::new(Slot {
                            state: Mutex::new(SlotState {
                                busy: false,
                                retired: false,
                                pairing: None,
                                last_used: now,
                                use_seq: self.clock.fetch_add(1, Ordering::Relaxed),
                            }),
                        });
                        slots.insert(peer, Arc::clone(&slot));
                        slot
                    }
                }
            };
            self.silence_all(silenced, "expired or evicted");
            let mut state = lock(&slot.state);
            if state.retired {
                continue;
            }
            if state.busy {
                return Err(CheckoutError::KeyBusy);
            }
            state.busy = true;
            let pairing = state.pairing.take();
            drop(state);
            return Ok(KeyLease {
                table: self,
                peer,
                slot,
                pairing,
            });
        }
    }

    /// Destroy every pairing idle longer than the idle time (and not in use). Returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let expired = {
            let mut slots = lock(&self.slots);
            self.expire_locked(&mut slots, now)
        };
        let n = expired.len();
        self.silence_all(expired, "expired");
        n
    }

    fn expire_locked(
        &self,
        slots: &mut HashMap<Peer, Arc<Slot<Q>>>,
        now: Instant,
    ) -> Vec<Pairing<Q>> {
        let mut out = Vec::new();
        slots.retain(|peer, slot| {
            let mut state = lock(&slot.state);
            let idle_for = now.saturating_duration_since(state.last_used);
            if state.busy || idle_for < self.idle {
                return true;
            }
            state.retired = true;
            if let Some(p) = state.pairing.take() {
                debug!(
                    qpn = peer.qp_num,
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

    fn evict_lru_locked(&self, slots: &mut HashMap<Peer, Arc<Slot<Q>>>) -> Option<Pairing<Q>> {
        let mut oldest: Option<(u64, Peer)> = None;
        for (peer, slot) in slots.iter() {
            let state = lock(&slot.state);
            if state.busy {
                continue;
            }
            if oldest.is_none_or(|(seq, _)| state.use_seq < seq) {
                oldest = Some((state.use_seq, *peer));
            }
        }
        let (_, peer) = oldest?;
        let slot = slots.remove(&peer)?;
        let mut state = lock(&slot.state);
        state.retired = true;
        let pairing = state.pairing.take();
        if let Some(p) = &pairing {
            debug!(
                qpn = peer.qp_num,
                pairing = p.id,
                "pairing evicted (table full)"
            );
            Stats::bump(&self.stats.pairings_evicted);
        }
        pairing
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

/// Exclusive hold of one key; returns the pairing to the table when dropped (or retires the
/// key when it holds none).
pub struct KeyLease<'t, Q: RdmaQp> {
    table: &'t PairingTable<Q>,
    peer: Peer,
    slot: Arc<Slot<Q>>,
    pairing: Option<Pairing<Q>>,
}

impl<Q: RdmaQp> KeyLease<'_, Q> {
    pub fn peer(&self) -> Peer {
        self.peer
    }

    pub fn pairing(&self) -> Option<&Pairing<Q>> {
        self.pairing.as_ref()
    }

    pub fn pairing_mut(&mut self) -> Option<&mut Pairing<Q>> {
        self.pairing.as_mut()
    }

    /// Silence and destroy the key's pairing, if any (before a re-pairing, or after a failure).
    pub fn destroy_pairing(&mut self, why: &str) {
        if let Some(p) = self.pairing.take() {
            self.table.silence(p, why);
        }
    }

    /// Store a new pairing; an old one is silenced first.
    pub fn install(&mut self, pairing: Pairing<Q>) {
        self.destroy_pairing("replaced");
        Stats::add(&self.table.stats.pairings_live, 1);
        self.pairing = Some(pairing);
    }
}

impl<Q: RdmaQp> Drop for KeyLease<'_, Q> {
    fn drop(&mut self) {
        let now = Instant::now();
        let seq = self.table.clock.fetch_add(1, Ordering::Relaxed);
        if std::thread::panicking() {
            // The holder panicked, maybe mid-transfer: its QP may have work requests posted and
            // its state is unknown. Silence it; the key leaves the table (next request: 428).
            self.destroy_pairing("the request panicked");
        }
        match self.pairing.take() {
            Some(p) => {
                let mut state = lock(&self.slot.state);
                state.pairing = Some(p);
                state.busy = false;
                state.last_used = now;
                state.use_seq = seq;
            }
            None => {
                let mut slots = lock(&self.table.slots);
                let mut state = lock(&self.slot.state);
                state.busy = false;
                state.retired = true;
                if slots
                    .get(&self.peer)
                    .is_some_and(|s| Arc::ptr_eq(s, &self.slot))
                {
                    slots.remove(&self.peer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::port::{QpSetup, RdmaPort};
    use crate::rdma::test_double::{DoublePort, QpLog};
    use std::sync::atomic::AtomicUsize;

    fn peer(n: u32) -> Peer {
        Peer {
            gid: [7; 16],
            qp_num: n,
        }
    }

    fn pair(
        port: &DoublePort,
        table: &PairingTable<<DoublePort as RdmaPort>::Qp>,
        n: u32,
        id: u16,
    ) {
        let mut lease = table.checkout(peer(n), Instant::now()).expect("room");
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
        let table = PairingTable::new(4, Duration::from_secs(60), stats.clone());
        pair(&port, &table, 1, 11);
        assert_eq!(table.len(), 1);
        {
            let lease = table.checkout(peer(1), Instant::now()).expect("room");
            assert_eq!(lease.pairing().map(|p| p.id), Some(11));
        }
        {
            // A lease that ends without a pairing takes its key out of the table.
            let lease = table.checkout(peer(2), Instant::now()).expect("room");
            assert!(lease.pairing().is_none());
        }
        assert_eq!(table.len(), 1);
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn replacing_a_pairing_silences_the_old_qp_first() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, Duration::from_secs(60), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let old_qpn = {
            let lease = table.checkout(peer(1), Instant::now()).expect("room");
            lease.pairing().map(|p| p.qp.qp_num()).expect("paired")
        };
        let mut lease = table.checkout(peer(1), Instant::now()).expect("room");
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
        let table = PairingTable::new(8, Duration::from_secs(10), stats.clone());
        pair(&port, &table, 1, 11);
        let qpn = table
            .checkout(peer(1), Instant::now())
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
            .checkout(peer(1), Instant::now())
            .expect("room")
            .pairing()
            .is_none());
    }

    #[test]
    fn a_pairing_in_use_does_not_expire() {
        let port = DoublePort::new();
        let table = PairingTable::new(8, Duration::from_secs(10), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let lease = table.checkout(peer(1), Instant::now()).expect("room");
        assert_eq!(table.expire(Instant::now() + Duration::from_secs(60)), 0);
        drop(lease);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn full_table_evicts_least_recently_used() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(2, Duration::from_secs(600), stats.clone());
        pair(&port, &table, 1, 11);
        pair(&port, &table, 2, 12);
        // Touch 1, so 2 is the least recently used.
        drop(table.checkout(peer(1), Instant::now()).expect("room"));
        let qpn2 = table
            .checkout(peer(2), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.qp.qp_num());
        // ... and touch 1 again after 2.
        drop(table.checkout(peer(1), Instant::now()).expect("room"));
        pair(&port, &table, 3, 13);
        assert_eq!(table.len(), 2);
        assert_eq!(stats.pairings_evicted.load(Ordering::Relaxed), 1);
        assert!(port
            .log()
            .contains(&QpLog::Destroyed(qpn2.expect("paired"))));
        assert!(table
            .checkout(peer(1), Instant::now())
            .expect("room")
            .pairing()
            .is_some());
    }

    #[test]
    fn full_table_of_busy_pairings_is_table_full() {
        let port = DoublePort::new();
        let table = PairingTable::new(1, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let _busy = table.checkout(peer(1), Instant::now()).expect("room");
        assert_eq!(
            table.checkout(peer(2), Instant::now()).err(),
            Some(CheckoutError::TableFull)
        );
    }

    #[test]
    fn a_busy_key_is_refused_at_once_and_free_again_after_release() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let held = table.checkout(peer(1), Instant::now()).expect("room");
        assert_eq!(
            table.checkout(peer(1), Instant::now()).err(),
            Some(CheckoutError::KeyBusy)
        );
        // Other keys are not affected.
        assert!(table.checkout(peer(2), Instant::now()).is_ok());
        drop(held);
        let again = table.checkout(peer(1), Instant::now()).expect("free again");
        assert_eq!(again.pairing().map(|p| p.id), Some(11));
    }

    #[test]
    fn a_lease_dropped_by_a_panic_destroys_its_pairing() {
        let port = DoublePort::new();
        let stats = Arc::new(Stats::default());
        let table = PairingTable::new(4, Duration::from_secs(600), stats.clone());
        pair(&port, &table, 1, 11);
        let qpn = table
            .checkout(peer(1), Instant::now())
            .expect("room")
            .pairing()
            .map(|p| p.qp.qp_num())
            .expect("paired");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _lease = table.checkout(peer(1), Instant::now()).expect("room");
            panic!("scripted panic while holding the key");
        }));
        assert!(r.is_err());
        let log = port.log();
        assert!(log.contains(&QpLog::ToError(qpn)) && log.contains(&QpLog::Destroyed(qpn)));
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 0);
        // The key is free and unpaired: the client's next request pairs again.
        assert!(table
            .checkout(peer(1), Instant::now())
            .expect("free")
            .pairing()
            .is_none());
    }

    #[test]
    fn requests_for_one_key_are_serialised() {
        let port = DoublePort::new();
        let table = PairingTable::new(4, Duration::from_secs(600), Arc::new(Stats::default()));
        pair(&port, &table, 1, 11);
        let inside = AtomicUsize::new(0);
        let max_inside = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let lease = loop {
                            match table.checkout(peer(1), Instant::now()) {
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
}
