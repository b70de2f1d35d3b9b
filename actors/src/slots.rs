//! Numbered slots handed out one holder at a time (hipobj-server's staging slots: each transfer
//! cuts its staging buffer into slots that move between the poller, the NIC and the file thread).
//!
//! A [`SlotLedger`] holds the numbers of the free slots. [`SlotLedger::take`] hands one out as a
//! [`SlotTicket`], owned by value: `Send` (it may move to another thread with its job), not
//! `Clone`, and the slot is free again only when the ticket is dropped, wherever that happens. So
//! a slot number is never held by two tickets at once, and a returned slot is reused.

use crate::fault;
use crate::sync::{Arc, Mutex};

/// The free slots of one cut memory.
#[derive(Debug)]
pub struct SlotLedger {
    free: Mutex<Vec<usize>>,
    count: usize,
}

impl SlotLedger {
    /// Slots `0..count`, all free; [`SlotLedger::take`] hands out the lowest first.
    pub fn new(count: usize) -> SlotLedger {
        SlotLedger {
            free: Mutex::new((0..count).rev().collect()),
            count,
        }
    }

    /// Slots in the ledger (free or held).
    pub fn count(&self) -> usize {
        self.count
    }

    /// A free slot of `ledger`, now held by the returned ticket; `None` while every slot is held.
    pub fn take(ledger: &Arc<SlotLedger>) -> Option<SlotTicket> {
        let mut free = ledger.free.lock();
        let index = if fault::broken("slot-take-removes") {
            free.last().copied()
        } else {
            free.pop()
        }?;
        Some(SlotTicket {
            ledger: Arc::clone(ledger),
            index,
        })
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.free.lock().len()
    }
}

/// Sole hold of one slot of a [`SlotLedger`]; dropping it frees the slot.
#[derive(Debug)]
pub struct SlotTicket {
    ledger: Arc<SlotLedger>,
    index: usize,
}

impl SlotTicket {
    /// The slot's number (`0..count`).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for SlotTicket {
    fn drop(&mut self) {
        if fault::broken("slot-drop-returns") {
            return;
        }
        self.ledger.free.lock().push(self.index);
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_held_once_and_reused_after_its_ticket_drops() {
        let ledger = Arc::new(SlotLedger::new(2));
        let a = SlotLedger::take(&ledger).expect("a");
        let b = SlotLedger::take(&ledger).expect("b");
        assert_ne!(a.index(), b.index());
        assert!(SlotLedger::take(&ledger).is_none(), "both held");
        let freed = a.index();
        drop(a);
        assert_eq!(ledger.free(), 1);
        let c = std::thread::scope(|s| {
            s.spawn(|| SlotLedger::take(&ledger).map(|t| t.index()))
                .join()
        })
        .expect("thread");
        assert_eq!(c, Some(freed), "the returned slot is reused");
        assert_eq!(
            ledger.free(),
            1,
            "a ticket dropped on another thread frees its slot"
        );
        drop(b);
        assert_eq!((ledger.free(), ledger.count()), (2, 2));
    }
}
