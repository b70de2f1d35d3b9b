//! A table of keys, each held by at most one lease at a time (hipobj-server's pairing table: one
//! server QP per pairing key, one request per key at once).
//!
//! [`KeyTable::checkout`] hands out a [`Lease`] that owns the key's value (the QP itself, by
//! value) until it is dropped; while it is held, another checkout of the key is refused at once
//! ([`Refused::Busy`]). Dropping a lease that holds a value puts it back; dropping one without a
//! value retires the key's entry and takes it out of the table. An entry taken out of the table
//! (retired by that drop, or by the owner's expiry and eviction under [`KeyTable::with_entries`])
//! is never leased again: a checkout that reached it before it was retired looks the key up anew.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use crate::fault;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex, MutexGuard};

/// One key's state.
#[derive(Debug)]
pub struct EntryState<V> {
    /// A lease holds this key.
    pub busy: bool,
    /// Taken out of the table; a checkout that finds it must look the key up again.
    pub retired: bool,
    /// The key's value while no lease holds it.
    pub value: Option<V>,
    pub last_used: Instant,
    /// Logical time of the last release, for least-recently-used choices.
    pub use_seq: u64,
}

/// One key's entry.
#[derive(Debug)]
pub struct Entry<V> {
    state: Mutex<EntryState<V>>,
}

impl<V> Entry<V> {
    pub fn lock(&self) -> MutexGuard<'_, EntryState<V>> {
        self.state.lock()
    }
}

/// The entries, as [`KeyTable::with_entries`] and the room maker of a checkout see them.
pub type Entries<K, V> = HashMap<K, Arc<Entry<V>>>;

/// Why a checkout gave no lease.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another lease holds the key now.
    Busy,
    /// The key is new and the room maker found no room.
    Full,
}

/// The table.
#[derive(Debug)]
pub struct KeyTable<K, V> {
    entries: Mutex<Entries<K, V>>,
    clock: AtomicU64,
}

impl<K: Eq + Hash + Clone, V> Default for KeyTable<K, V> {
    fn default() -> Self {
        KeyTable::new()
    }
}

impl<K: Eq + Hash + Clone, V> KeyTable<K, V> {
    pub fn new() -> Self {
        KeyTable {
            entries: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
        }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next logical time (for `use_seq`).
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Work on the entries under the table's lock (expiry, eviction: retire what you take out).
    pub fn with_entries<T>(&self, f: impl FnOnce(&mut Entries<K, V>) -> T) -> T {
        f(&mut self.entries.lock())
    }

    /// Exclusive hold of `key`. A new key is added once `make_room` (called under the table's
    /// lock) made room for it: `Ok(values taken out)`, or `Err(values taken out)` when it could
    /// not ([`Refused::Full`]). Every value taken out comes back in `ended` for the caller to
    /// end, whatever the answer.
    pub fn checkout(
        &self,
        key: K,
        now: Instant,
        mut make_room: impl FnMut(&mut Entries<K, V>) -> Result<Vec<V>, Vec<V>>,
        ended: &mut Vec<V>,
    ) -> Result<Lease<'_, K, V>, Refused> {
        loop {
            let entry = {
                let mut entries = self.entries.lock();
                match entries.get(&key) {
                    Some(entry) => Arc::clone(entry),
                    None => {
                        match make_room(&mut entries) {
                            Ok(out) => ended.extend(out),
                            Err(out) => {
                                ended.extend(out);
                                return Err(Refused::Full);
                            }
                        }
                        let entry = Arc::new(Entry {
                            state: Mutex::new(EntryState {
                                busy: false,
                                retired: false,
                                value: None,
                                last_used: now,
                                use_seq: self.tick(),
                            }),
                        });
                        entries.insert(key.clone(), Arc::clone(&entry));
                        entry
                    }
                }
            };
            let mut state = entry.lock();
            if state.retired && !fault::broken("checkout-skips-retired") {
                continue;
            }
            if state.busy && !fault::broken("checkout-refuses-busy") {
                return Err(Refused::Busy);
            }
            state.busy = true;
            let value = state.value.take();
            drop(state);
            return Ok(Lease {
                table: self,
                key,
                entry,
                value,
            });
        }
    }

    /// Exclusive hold of `key` when it is in the table and no lease holds it; never adds a key.
    pub fn lease_existing(&self, key: &K) -> Option<Lease<'_, K, V>> {
        let entry = self.entries.lock().get(key).map(Arc::clone)?;
        let mut state = entry.lock();
        if state.retired || state.busy {
            return None;
        }
        state.busy = true;
        let value = state.value.take();
        drop(state);
        Some(Lease {
            table: self,
            key: key.clone(),
            entry,
            value,
        })
    }
}

/// Exclusive hold of one key; puts its value back when dropped (or retires the key when it holds
/// none).
#[derive(Debug)]
pub struct Lease<'t, K: Eq + Hash + Clone, V> {
    table: &'t KeyTable<K, V>,
    key: K,
    entry: Arc<Entry<V>>,
    value: Option<V>,
}

impl<K: Eq + Hash + Clone, V> Lease<'_, K, V> {
    pub fn key(&self) -> &K {
        &self.key
    }

    pub fn value(&self) -> Option<&V> {
        self.value.as_ref()
    }

    pub fn value_mut(&mut self) -> Option<&mut V> {
        self.value.as_mut()
    }

    /// Take the value out (the key is retired when the lease drops without one).
    pub fn take(&mut self) -> Option<V> {
        self.value.take()
    }

    /// Hold `value` (returned to the table with the lease); the old one, if any, comes back.
    pub fn put(&mut self, value: V) -> Option<V> {
        self.value.replace(value)
    }
}

impl<K: Eq + Hash + Clone, V> Drop for Lease<'_, K, V> {
    fn drop(&mut self) {
        let seq = self.table.tick();
        match self.value.take() {
            Some(v) => {
                let mut state = self.entry.lock();
                state.value = Some(v);
                state.busy = false;
                state.last_used = Instant::now();
                state.use_seq = seq;
            }
            None => {
                let mut entries = self.table.entries.lock();
                let mut state = self.entry.lock();
                state.busy = false;
                state.retired = true;
                if entries
                    .get(&self.key)
                    .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
                {
                    entries.remove(&self.key);
                }
            }
        }
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;

    fn room(_: &mut Entries<u32, &'static str>) -> Result<Vec<&'static str>, Vec<&'static str>> {
        Ok(Vec::new())
    }

    #[test]
    fn a_key_is_held_once_its_value_comes_back_and_a_lease_without_one_retires_it() {
        let t: KeyTable<u32, &'static str> = KeyTable::new();
        let now = Instant::now();
        let mut ended = Vec::new();
        let mut a = t.checkout(1, now, room, &mut ended).expect("free");
        assert!(a.value().is_none());
        assert_eq!(
            t.checkout(1, now, room, &mut ended).err(),
            Some(Refused::Busy)
        );
        assert!(t.lease_existing(&1).is_none(), "busy");
        a.put("qp");
        drop(a);
        let mut b = t.lease_existing(&1).expect("back");
        assert_eq!(b.take(), Some("qp"));
        drop(b);
        assert!(t.is_empty(), "a lease without a value retires its key");
        let full = |_: &mut Entries<u32, &'static str>| Err(vec!["evicted"]);
        assert_eq!(
            t.checkout(2, now, full, &mut ended).err(),
            Some(Refused::Full)
        );
        assert_eq!(ended, ["evicted"]);
    }
}
