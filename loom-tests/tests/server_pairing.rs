//! Models: hipobj-server's pairing table (server/src/rdma/pairing.rs, over the real
//! `hipobj_actors::keyed::KeyTable`). Two requests of one pairing key race: one request per key
//! at a time (the other is refused, never given the same QP), and a lease that drops its key
//! (a failed transfer destroyed the pairing) never strands the other request's new pairing in
//! an entry that left the table.
#![cfg(hipobj_loom)]

use hipobj_actors::keyed::{Entries, KeyTable, Refused};
use hipobj_actors::sync::{thread, Arc};
use hipobj_loom_tests::harness::check;
use hipobj_loom_tests::resource::Resource;
use std::sync::Arc as StdArc;
use std::time::Instant;

/// The pairing key (one client QP of one requester).
const KEY: u32 = 7;

type Table = KeyTable<u32, StdArc<Resource>>;

fn room(
    _: &mut Entries<u32, StdArc<Resource>>,
) -> Result<Vec<StdArc<Resource>>, Vec<StdArc<Resource>>> {
    Ok(Vec::new())
}

/// One request of the key: check the key out, pair when it has no QP, move bytes on the QP (an
/// exclusive use of it), give the lease back. `None`: refused as busy (503).
fn request(table: &Table, fresh: &StdArc<Resource>) -> Option<bool> {
    let mut ended = Vec::new();
    let mut lease = match table.checkout(KEY, Instant::now(), room, &mut ended) {
        Ok(lease) => lease,
        Err(Refused::Busy) => return None,
        Err(Refused::Full) => panic!("the table has room"),
    };
    assert!(ended.is_empty());
    let paired = lease.value().is_some();
    if !paired {
        lease.put(fresh.clone());
    }
    lease.value().expect("paired").write();
    Some(paired)
}

/// Two requests of one key at once, on a key already paired: each moves its bytes on the QP or
/// is refused as busy; never both on the QP at once (it is a loom cell: two users race).
#[test]
fn a_pairing_key_serves_one_request_at_a_time() {
    check(
        "a_pairing_key_serves_one_request_at_a_time",
        3,
        &["one refused as busy", "both served in turn"],
        |seen| {
            let table = Arc::new(Table::new());
            let qp = Resource::new("the key's server QP");
            assert_eq!(request(&table, &qp), Some(false), "the first request pairs");
            let other = table.clone();
            let t = thread::spawn(move || request(&other, &Resource::new("a second QP")));
            let here = request(&table, &Resource::new("a second QP"));
            let there = t.join().unwrap();
            // A second QP paired while the key is paired means two leases held the key at once.
            match (here, there) {
                (Some(true), Some(true)) => seen.record("both served in turn"),
                (None, Some(true)) | (Some(true), None) => seen.record("one refused as busy"),
                other => panic!("one key leased twice at once: outcomes {other:?}"),
            }
            let lease = table
                .lease_existing(&KEY)
                .expect("the key is back in the table");
            assert!(lease.value().is_some(), "with its pairing");
        },
    );
}

/// A request whose transfer failed drops the key's pairing and its lease (the key retires)
/// while another request of the key checks it out and pairs: that new pairing must end in the
/// table, where the next request finds it, not in the retired entry.
#[test]
fn a_retired_key_is_looked_up_again() {
    check(
        "a_retired_key_is_looked_up_again",
        3,
        &["paired after the retirement", "refused as busy"],
        |seen| {
            let table = Arc::new(Table::new());
            let old = Resource::new("the failed server QP");
            let mut ended = Vec::new();
            let mut failed = table
                .checkout(KEY, Instant::now(), room, &mut ended)
                .expect("free");
            failed.put(old);
            let other = table.clone();
            let t = thread::spawn(move || {
                let fresh = Resource::new("the new server QP");
                request(&other, &fresh)
            });
            // The failed transfer destroys its pairing; the lease drops without one.
            drop(failed.take());
            drop(failed);
            match t.join().unwrap() {
                Some(false) => {
                    seen.record("paired after the retirement");
                    let lease = table
                        .lease_existing(&KEY)
                        .expect("the new pairing went into an entry that left the table");
                    assert!(lease.value().is_some(), "the key lost its new pairing");
                }
                None => {
                    seen.record("refused as busy");
                    assert!(table.is_empty(), "the failed key stayed in the table");
                }
                Some(true) => panic!("served on the destroyed pairing"),
            }
        },
    );
}
