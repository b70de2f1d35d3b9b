//! The hipobj-rc-v2 session table (docs/protocol.md rule 10.3 and section 14): which sessions exist,
//! whom each belongs to, its cookie, its state and deadline, and the limits on how many sessions
//! and staging bytes may be held at once.
//!
//! A session belongs to its requester (HTTP peer address + identity): a READY or CANCEL from
//! anyone else finds nothing (404, as an unknown id). States: `Waiting` (prepared, holding its
//! QP and what it moves) -> `Moving` (a READY took it; the worker owns the QP) -> `Ended` (a
//! tombstone, so a second READY is answered 409 instead of 404 until it is swept). A `Waiting`
//! session past its deadline (T_prep) is removed and handed back for reclaiming, by the janitor
//! or by the READY that finds it expired. The table never calls a verb: what it hands back is
//! reclaimed by the engine outside its lock.

use hipobj_actors::sync::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::identity::Requester;

/// The 16 bytes of `x-amz-rdma-session`.
pub type SessionId = [u8; 16];

/// How many sessions, how much staging, how long.
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    /// Sessions `Waiting` or `Moving` at once.
    pub max_sessions: usize,
    /// Staging bytes held by sessions at once.
    pub staging_bytes: u64,
    /// T_prep: from PREPARE to READY.
    pub prepare_timeout: Duration,
}

enum State<S> {
    Waiting(Box<S>),
    Moving,
    Ended,
}

struct Entry<S> {
    owner: Requester,
    cookie: u32,
    /// The client QP named at PREPARE: READY must name the same one.
    client_qpn: u32,
    /// Staging bytes it holds until it ends.
    staged: u64,
    /// `Waiting`: T_prep; `Ended`: when the tombstone goes.
    deadline: Instant,
    state: State<S>,
}

struct Inner<S> {
    map: HashMap<SessionId, Entry<S>>,
    /// Sessions not `Ended`, plus reservations.
    live: usize,
    staged: u64,
}

/// Why a READY gets no session to move.
#[derive(Debug)]
pub enum ClaimError<S> {
    /// No such session for this requester (unknown, foreign, or swept).
    Unknown,
    /// It was past its deadline: removed; the caller reclaims it and answers as `Unknown`.
    Expired(Box<S>),
    /// Wrong cookie: the session stays as it was.
    Cookie,
    /// READY names another client QP than PREPARE's token: the session stays as it was.
    OtherQp,
    /// Moving or ended already (one session moves at most one transfer).
    WrongState,
}

/// The table is at its session or staging limit.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

pub struct SessionTable<S> {
    inner: Mutex<Inner<S>>,
    limits: SessionLimits,
}

/// Room for one session, held while it is being prepared; dropped unused it frees the room.
pub struct Reservation<'t, S> {
    table: &'t SessionTable<S>,
    staged: u64,
    used: bool,
}

impl<S> Drop for Reservation<'_, S> {
    fn drop(&mut self) {
        if !self.used {
            self.table.release(self.staged);
        }
    }
}

/// What the new session is.
pub struct NewSession<S> {
    pub owner: Requester,
    pub cookie: u32,
    pub client_qpn: u32,
    pub prepared: S,
}

impl<S> SessionTable<S> {
    pub fn new(limits: SessionLimits) -> Self {
        SessionTable {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                live: 0,
                staged: 0,
            }),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        self.inner.lock()
    }

    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// Room for one more session holding `staged` bytes, or [`Full`] (503).
    pub fn reserve(&self, staged: u64) -> Result<Reservation<'_, S>, Full> {
        let mut inner = self.lock();
        if inner.live >= self.limits.max_sessions
            || inner.staged.saturating_add(staged) > self.limits.staging_bytes
        {
            return Err(Full);
        }
        inner.live += 1;
        inner.staged += staged;
        Ok(Reservation {
            table: self,
            staged,
            used: false,
        })
    }

    fn release(&self, staged: u64) {
        let mut inner = self.lock();
        inner.live = inner.live.saturating_sub(1);
        inner.staged = inner.staged.saturating_sub(staged);
    }

    /// Store a prepared session under a fresh random id, `Waiting` until `now` + T_prep.
    pub fn insert(
        &self,
        mut room: Reservation<'_, S>,
        new: NewSession<S>,
        now: Instant,
    ) -> SessionId {
        let mut inner = self.lock();
        let id = loop {
            let id = random_id();
            if !inner.map.contains_key(&id) {
                break id;
            }
        };
        inner.map.insert(
            id,
            Entry {
                owner: new.owner,
                cookie: new.cookie,
                client_qpn: new.client_qpn,
                staged: room.staged,
                deadline: now + self.limits.prepare_timeout,
                state: State::Waiting(Box::new(new.prepared)),
            },
        );
        room.used = true;
        id
    }

    /// Whether `id` is in the table, whatever its owner and state (tombstones included): which
    /// device's table a READY or CANCEL goes to.
    pub fn holds(&self, id: &SessionId) -> bool {
        self.lock().map.contains_key(id)
    }

    /// READY: the `Waiting` session `id` of `owner` with this cookie and client QP becomes
    /// `Moving` and its contents are handed over. Call [`SessionTable::finish`] afterwards.
    pub fn claim(
        &self,
        id: &SessionId,
        owner: &Requester,
        cookie: u32,
        client_qpn: u32,
        now: Instant,
    ) -> Result<Box<S>, ClaimError<S>> {
        let mut inner = self.lock();
        let Some(entry) = inner.map.get_mut(id).filter(|e| e.owner == *owner) else {
            return Err(ClaimError::Unknown);
        };
        if matches!(entry.state, State::Waiting(_)) && now >= entry.deadline {
            let staged = entry.staged;
            let Some(Entry {
                state: State::Waiting(s),
                ..
            }) = inner.map.remove(id)
            else {
                return Err(ClaimError::Unknown);
            };
            inner.live = inner.live.saturating_sub(1);
            inner.staged = inner.staged.saturating_sub(staged);
            return Err(ClaimError::Expired(s));
        }
        if entry.cookie != cookie {
            return Err(ClaimError::Cookie);
        }
        if entry.client_qpn != client_qpn {
            return Err(ClaimError::OtherQp);
        }
        match std::mem::replace(&mut entry.state, State::Moving) {
            State::Waiting(s) => Ok(s),
            other => {
                entry.state = other;
                Err(ClaimError::WrongState)
            }
        }
    }

    /// The transfer of a claimed session ended (either way): its room is freed and a tombstone
    /// stays for T_prep.
    pub fn finish(&self, id: &SessionId, now: Instant) {
        let until = now + self.limits.prepare_timeout;
        let mut inner = self.lock();
        let Some(entry) = inner.map.get_mut(id) else {
            return;
        };
        if !matches!(entry.state, State::Moving) {
            return;
        }
        entry.state = State::Ended;
        entry.deadline = until;
        let staged = entry.staged;
        inner.live = inner.live.saturating_sub(1);
        inner.staged = inner.staged.saturating_sub(staged);
    }

    /// CANCEL: `owner`'s `Waiting` session ends now; its contents are handed back for
    /// reclaiming. Anything else (unknown, foreign, moving, ended) is left as it is.
    pub fn cancel(&self, id: &SessionId, owner: &Requester, now: Instant) -> Option<Box<S>> {
        let until = now + self.limits.prepare_timeout;
        let mut inner = self.lock();
        let entry = inner.map.get_mut(id).filter(|e| e.owner == *owner)?;
        if !matches!(entry.state, State::Waiting(_)) {
            return None;
        }
        let State::Waiting(s) = std::mem::replace(&mut entry.state, State::Ended) else {
            return None;
        };
        entry.deadline = until;
        let staged = entry.staged;
        inner.live = inner.live.saturating_sub(1);
        inner.staged = inner.staged.saturating_sub(staged);
        Some(s)
    }

    /// Remove `Waiting` sessions past T_prep (handed back for reclaiming) and old tombstones.
    pub fn expire(&self, now: Instant) -> Vec<Box<S>> {
        let mut inner = self.lock();
        let due: Vec<SessionId> = inner
            .map
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Moving) && now >= e.deadline)
            .map(|(id, _)| *id)
            .collect();
        let mut reclaim = Vec::new();
        for id in due {
            let Some(entry) = inner.map.remove(&id) else {
                continue;
            };
            if let State::Waiting(s) = entry.state {
                inner.live = inner.live.saturating_sub(1);
                inner.staged = inner.staged.saturating_sub(entry.staged);
                reclaim.push(s);
            }
        }
        reclaim
    }

    /// Sessions `Waiting` or `Moving` (and reservations).
    pub fn live(&self) -> usize {
        self.lock().live
    }

    /// Staging bytes held now.
    pub fn staged(&self) -> u64 {
        self.lock().staged
    }
}

fn random_id() -> SessionId {
    let mut id = [0u8; 16];
    hipobj::random::fill(&mut id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    fn who(ip: u8, name: &str) -> Requester {
        Requester::new(std::net::IpAddr::from([10, 0, 0, ip]), Identity::new(name))
    }

    fn table(max: usize, bytes: u64) -> SessionTable<&'static str> {
        SessionTable::new(SessionLimits {
            max_sessions: max,
            staging_bytes: bytes,
            prepare_timeout: Duration::from_secs(10),
        })
    }

    fn add(t: &SessionTable<&'static str>, owner: Requester, staged: u64) -> SessionId {
        let room = t.reserve(staged).expect("room");
        t.insert(
            room,
            NewSession {
                owner,
                cookie: 7,
                client_qpn: 0x11,
                prepared: "s",
            },
            Instant::now(),
        )
    }

    #[test]
    fn limits_count_sessions_and_staging_and_free_on_every_end() {
        let t = table(2, 100);
        let a = add(&t, who(1, "a"), 60);
        assert_eq!(t.reserve(41).err(), Some(Full));
        let b = add(&t, who(1, "a"), 40);
        assert_eq!(t.reserve(0).err(), Some(Full));
        assert_ne!(a, b);
        // Claimed and finished, cancelled: both free their room.
        t.claim(&a, &who(1, "a"), 7, 0x11, Instant::now())
            .expect("claim");
        assert_eq!(t.live(), 2);
        t.finish(&a, Instant::now());
        assert!(t.cancel(&b, &who(1, "a"), Instant::now()).is_some());
        assert_eq!((t.live(), t.staged()), (0, 0));
        // A reservation dropped unused frees its room.
        drop(t.reserve(100).expect("room again"));
        assert_eq!((t.live(), t.staged()), (0, 0));
    }

    #[test]
    fn a_session_is_only_its_owners_and_moves_once() {
        let t = table(4, 0);
        let id = add(&t, who(1, "a"), 0);
        let now = Instant::now();
        for other in [who(2, "a"), who(1, "b")] {
            assert!(matches!(
                t.claim(&id, &other, 7, 0x11, now),
                Err(ClaimError::Unknown)
            ));
            assert!(t.cancel(&id, &other, now).is_none());
        }
        assert!(matches!(
            t.claim(&id, &who(1, "a"), 8, 0x11, now),
            Err(ClaimError::Cookie)
        ));
        assert!(matches!(
            t.claim(&id, &who(1, "a"), 7, 0x12, now),
            Err(ClaimError::OtherQp)
        ));
        assert!(t.claim(&id, &who(1, "a"), 7, 0x11, now).is_ok());
        assert!(matches!(
            t.claim(&id, &who(1, "a"), 7, 0x11, now),
            Err(ClaimError::WrongState)
        ));
        t.finish(&id, now);
        assert!(matches!(
            t.claim(&id, &who(1, "a"), 7, 0x11, now),
            Err(ClaimError::WrongState)
        ));
        // The tombstone goes after T_prep; then the id is unknown.
        assert!(t.expire(now + Duration::from_secs(11)).is_empty());
        assert!(matches!(
            t.claim(&id, &who(1, "a"), 7, 0x11, now),
            Err(ClaimError::Unknown)
        ));
    }

    #[test]
    fn expired_sessions_are_handed_back_once() {
        let t = table(4, 100);
        let a = add(&t, who(1, "a"), 10);
        let b = add(&t, who(1, "a"), 10);
        let late = Instant::now() + Duration::from_secs(10);
        assert!(matches!(
            t.claim(&a, &who(1, "a"), 7, 0x11, late),
            Err(ClaimError::Expired(_))
        ));
        assert!(matches!(
            t.claim(&a, &who(1, "a"), 7, 0x11, late),
            Err(ClaimError::Unknown)
        ));
        assert_eq!(t.expire(Instant::now()).len(), 0);
        assert_eq!(t.expire(late).len(), 1);
        assert!(matches!(
            t.claim(&b, &who(1, "a"), 7, 0x11, late),
            Err(ClaimError::Unknown)
        ));
        assert_eq!((t.live(), t.staged()), (0, 0));
    }
}
