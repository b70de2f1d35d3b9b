//! The registered buffers: an immutable snapshot that lookups load without a lock, replaced
//! whole by the single writer, and one state word per buffer that arbitrates use against
//! deregistration.
//!
//! The state word packs three things so that one atomic operation sees all of them:
//! bits 0..32 count the calls using the buffer, bits 32..63 count staging copies that timed out and
//! still run, and bit 63 marks the buffer retired (deregistered). A call may use a buffer only while
//! it is neither retired nor pending; deregistration retires it only from the all-zero state.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, ArcCell};
use std::collections::BTreeMap;

const USES_MASK: u64 = 0xffff_ffff;
const PENDING_ONE: u64 = 1 << 32;
const PENDING_MASK: u64 = 0x7fff_ffff << 32;
const RETIRED: u64 = 1 << 63;

/// Why a buffer cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UseError {
    /// It was deregistered.
    Retired,
    /// A staging copy that timed out still runs.
    Pending,
}

/// Why a buffer cannot be deregistered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveError {
    NotRegistered,
    /// A call uses it, or a timed-out staging copy still runs.
    Busy,
}

/// A registration with exact base `base`, `len` bytes long.
pub struct Entry<E> {
    base: usize,
    len: usize,
    state: AtomicU64,
    payload: E,
}

impl<E> Entry<E> {
    pub fn new(base: usize, len: usize, payload: E) -> Arc<Entry<E>> {
        Arc::new(Entry {
            base,
            len,
            state: AtomicU64::new(0),
            payload,
        })
    }

    pub fn base(&self) -> usize {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn payload(&self) -> &E {
        &self.payload
    }

    /// Calls using it now.
    pub fn uses(&self) -> u64 {
        self.state.load(Ordering::Acquire) & USES_MASK
    }

    /// Timed-out staging copies still running on it.
    pub fn pending(&self) -> u64 {
        (self.state.load(Ordering::Acquire) & PENDING_MASK) >> 32
    }

    pub fn is_retired(&self) -> bool {
        self.state.load(Ordering::Acquire) & RETIRED != 0
    }

    /// Start using the buffer for the life of the guard.
    pub fn try_use(this: &Arc<Entry<E>>) -> Result<UseGuard<E>, UseError> {
        let mut cur = this.state.load(Ordering::Acquire);
        loop {
            if cur & RETIRED != 0 {
                return Err(UseError::Retired);
            }
            if cur & PENDING_MASK != 0 && !crate::fault::broken("use-checks-pending") {
                return Err(UseError::Pending);
            }
            if cur & USES_MASK == USES_MASK {
                // 2^32 - 1 concurrent users cannot happen with bounded threads; refuse rather than wrap.
                return Err(UseError::Pending);
            }
            match this.state.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(UseGuard {
                        entry: this.clone(),
                    })
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Retire the buffer if nothing uses it and no staging copy is pending.
    fn try_retire(&self) -> Result<(), RemoveError> {
        match self
            .state
            .compare_exchange(0, RETIRED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(now) if now & RETIRED != 0 => Err(RemoveError::NotRegistered),
            Err(_) => Err(RemoveError::Busy),
        }
    }
}

impl<E> std::fmt::Debug for Entry<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field(
                "state",
                &format_args!("{:#x}", self.state.load(Ordering::Relaxed)),
            )
            .finish()
    }
}

/// One call's use of a buffer.
pub struct UseGuard<E> {
    entry: Arc<Entry<E>>,
}

impl<E> UseGuard<E> {
    pub fn entry(&self) -> &Arc<Entry<E>> {
        &self.entry
    }

    /// Turn this use into a pending staging copy so that deregistration never sees the buffer idle
    /// in between: the pending mark is taken before the use is given back.
    pub fn into_pending(self) -> PendingGuard<E> {
        // Fix (loom model 5): this used to add 2^32 - 1 and `mem::forget(self)`, which also forgot
        // the guard's own `Arc<Entry>` and leaked the registration (and its staging memory) on every
        // timed-out copy. Taking the pending mark first, then dropping the guard normally (which
        // gives back the use) keeps the word non-zero throughout and drops the reference.
        if crate::fault::broken("pending-before-use-ends") {
            let entry = self.entry.clone();
            drop(self);
            entry.state.fetch_add(PENDING_ONE, Ordering::AcqRel);
            return PendingGuard { entry };
        }
        self.entry.state.fetch_add(PENDING_ONE, Ordering::AcqRel);
        let pending = PendingGuard {
            entry: self.entry.clone(),
        };
        drop(self);
        pending
    }
}

impl<E> Drop for UseGuard<E> {
    fn drop(&mut self) {
        self.entry.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A timed-out staging copy that still runs; dropping it (when the copy ends) frees the buffer.
pub struct PendingGuard<E> {
    entry: Arc<Entry<E>>,
}

impl<E> PendingGuard<E> {
    pub fn entry(&self) -> &Arc<Entry<E>> {
        &self.entry
    }
}

impl<E> Drop for PendingGuard<E> {
    fn drop(&mut self) {
        self.entry.state.fetch_sub(PENDING_ONE, Ordering::AcqRel);
    }
}

type Snapshot<E> = BTreeMap<usize, Arc<Entry<E>>>;

/// The set of registrations as calls see it: an immutable snapshot loaded without a lock. Only a
/// [`RegistryWriter`] (owned by the supervisor) replaces it.
pub struct Registry<E> {
    snapshot: ArcCell<Snapshot<E>>,
}

impl<E> Default for Registry<E> {
    fn default() -> Self {
        Registry::new()
    }
}

impl<E> Registry<E> {
    pub fn new() -> Registry<E> {
        Registry {
            snapshot: ArcCell::new(Some(Arc::new(BTreeMap::new()))),
        }
    }

    fn load(&self) -> Arc<Snapshot<E>> {
        self.snapshot.load().unwrap_or_default()
    }

    /// The registration whose base is exactly `base`.
    pub fn lookup(&self, base: usize) -> Option<Arc<Entry<E>>> {
        self.load().get(&base).cloned()
    }

    /// Whether `base` is registered.
    pub fn contains(&self, base: usize) -> bool {
        self.load().contains_key(&base)
    }

    pub fn len(&self) -> usize {
        self.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every registration now.
    pub fn entries(&self) -> Vec<Arc<Entry<E>>> {
        self.load().values().cloned().collect()
    }

    /// Publish a snapshot with `entry` added (`Some`) or `base` removed (`None`). The old snapshot
    /// is dropped here; the writer keeps its own reference to every entry it publishes, so this never
    /// drops the last reference to a registration.
    fn republish(&self, base: usize, entry: Option<Arc<Entry<E>>>) {
        let mut next: Snapshot<E> = (*self.load()).clone();
        match entry {
            Some(e) => next.insert(base, e),
            None => next.remove(&base),
        };
        drop(self.snapshot.swap(Some(Arc::new(next))));
    }
}

/// A base already registered (or being registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlreadyRegistered;

/// A registration slot: reserved while its memory is pinned off the supervisor, then published.
enum Slot<E> {
    Reserved { base: usize },
    Published(Arc<Entry<E>>),
}

/// The writer side of one instance's registry: a slab of slots (reserved or published) and the
/// base each slot holds. Owned by the supervisor, which is the only thread that changes it, so it
/// needs no lock; every change that calls can see is published through [`Registry`].
pub struct RegistryWriter<E> {
    slots: slab::Slab<Slot<E>>,
    by_base: BTreeMap<usize, usize>,
}

impl<E> Default for RegistryWriter<E> {
    fn default() -> Self {
        RegistryWriter::new()
    }
}

impl<E> RegistryWriter<E> {
    pub fn new() -> RegistryWriter<E> {
        RegistryWriter {
            slots: slab::Slab::new(),
            by_base: BTreeMap::new(),
        }
    }

    /// Slots in use (reserved or published).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Reserve `base` while its memory is pinned: a second registration of the same base is refused
    /// at once instead of pinning the memory twice. The slab key names the reservation.
    pub fn reserve(&mut self, base: usize) -> Result<usize, AlreadyRegistered> {
        if self.by_base.contains_key(&base) && !crate::fault::broken("reserve-checks-base") {
            return Err(AlreadyRegistered);
        }
        let key = self.slots.insert(Slot::Reserved { base });
        self.by_base.insert(base, key);
        Ok(key)
    }

    /// Publish `entry` in the reservation `key` (which must be a reservation of `entry`'s base);
    /// `Err(entry)` (handed back unchanged) otherwise.
    pub fn publish(
        &mut self,
        key: usize,
        entry: Arc<Entry<E>>,
        registry: &Registry<E>,
    ) -> Result<(), Arc<Entry<E>>> {
        match self.slots.get(key) {
            Some(Slot::Reserved { base }) if *base == entry.base => {}
            _ => return Err(entry),
        }
        registry.republish(entry.base, Some(entry.clone()));
        self.slots[key] = Slot::Published(entry);
        Ok(())
    }

    /// Give up the reservation `key` (pinning failed); a published slot is left alone.
    pub fn cancel(&mut self, key: usize) {
        if let Some(Slot::Reserved { base }) = self.slots.get(key) {
            self.by_base.remove(base);
            self.slots.remove(key);
        }
    }

    /// Retire and unpublish the registration based at `base`, handing it back so that the caller
    /// drops it (and unpins its memory) on its own thread.
    pub fn retire(
        &mut self,
        base: usize,
        registry: &Registry<E>,
    ) -> Result<Arc<Entry<E>>, RemoveError> {
        let key = *self.by_base.get(&base).ok_or(RemoveError::NotRegistered)?;
        let entry = match self.slots.get(key) {
            Some(Slot::Published(entry)) => entry.clone(),
            // Still being pinned: not registered yet.
            _ => return Err(RemoveError::NotRegistered),
        };
        if !crate::fault::broken("retire-checks-users") {
            entry.try_retire()?;
        }
        registry.republish(base, None);
        self.by_base.remove(&base);
        self.slots.remove(key);
        Ok(entry)
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;

    #[test]
    fn use_pending_retire() {
        let reg: Registry<u32> = Registry::new();
        let mut w = RegistryWriter::new();
        let key = w.reserve(0x1000).unwrap();
        assert_eq!(w.reserve(0x1000), Err(AlreadyRegistered), "reserved base");
        assert!(!reg.contains(0x1000), "a reservation is not published");
        assert_eq!(
            w.retire(0x1000, &reg).err(),
            Some(RemoveError::NotRegistered)
        );
        w.publish(key, Entry::new(0x1000, 64, 7), &reg).unwrap();
        assert_eq!(w.reserve(0x1000), Err(AlreadyRegistered), "published base");
        let e = reg.lookup(0x1000).unwrap();
        let g = Entry::try_use(&e).unwrap();
        assert_eq!(w.retire(0x1000, &reg).err(), Some(RemoveError::Busy));
        let p = g.into_pending();
        assert_eq!(e.uses(), 0);
        assert_eq!(e.pending(), 1);
        assert_eq!(Entry::try_use(&e).err(), Some(UseError::Pending));
        assert_eq!(w.retire(0x1000, &reg).err(), Some(RemoveError::Busy));
        drop(p);
        let removed = w.retire(0x1000, &reg).unwrap();
        assert_eq!(*removed.payload(), 7);
        assert_eq!(Entry::try_use(&e).err(), Some(UseError::Retired));
        assert_eq!(
            w.retire(0x1000, &reg).err(),
            Some(RemoveError::NotRegistered)
        );
        assert!(reg.is_empty() && w.is_empty());
        let key = w.reserve(0x2000).unwrap();
        w.cancel(key);
        assert!(w.is_empty());
        assert!(
            w.reserve(0x2000).is_ok(),
            "a cancelled reservation frees its base"
        );
    }

    #[test]
    fn pending_guard_keeps_exactly_one_reference() {
        let e = Entry::new(0x2000, 8, ());
        let pending = Entry::try_use(&e).unwrap().into_pending();
        assert_eq!(Arc::strong_count(&e), 2);
        assert_eq!((e.uses(), e.pending()), (0, 1));
        drop(pending);
        assert_eq!(Arc::strong_count(&e), 1, "the registration leaked");
        assert_eq!((e.uses(), e.pending()), (0, 0));
    }
}
