//! Readers' holds on the memory store: a reader's hold object comes and
//! goes with it; the writer promotes the plain checkpoint a live hold
//! names, so a reader of it keeps reading while the writer gives every
//! other checkpoint up, and demotes it once the hold is gone, also as a
//! writer mounted later (from `readers-promoted`); a snapshot the user
//! made is never demoted, and holds that expired or do not parse count
//! for nothing.

mod common;

use common::*;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_object::readers::{self, Hold, ReaderHold, Writer};
use lsfs_object::{ObjectDevice, Target};
use lsfs_vfs::Vfs;
use object_store::memory::InMemory;
use object_store::PutPayload;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

const FILE_BYTES: usize = 2 << 20;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn is_snapshot(fs: &Mutex<Lsfs>, cno: u64) -> Option<bool> {
    let g = fs.lock().unwrap();
    g.checkpoints()
        .iter()
        .find(|e| e.cno == cno)
        .map(|e| e.is_snapshot())
}

#[test]
fn a_readers_hold_object_comes_and_goes_with_it() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/hold");
    let rt = rt();
    assert!(readers::list_holds(&t, &rt).unwrap().is_empty());
    let h = ReaderHold::take(&t, 42, 120).unwrap();
    let l = readers::list_holds(&t, &rt).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id, h.id);
    let got = l[0].hold.clone().unwrap();
    assert_eq!((got.cno, got.pid), (42, std::process::id()));
    assert_eq!(got.expires, got.since + 120);
    assert!(got.is_live(readers::now_secs()));
    drop(h);
    assert!(
        readers::list_holds(&t, &rt).unwrap().is_empty(),
        "the hold went with the reader"
    );
}

#[test]
fn the_writer_keeps_a_held_checkpoint_and_lets_it_go_after() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/holds");
    let rt = rt();
    let mut cfg = MountConfig::default();
    cfg.store.protection_secs = 0;
    let mut w = mkfs_writer(&t, "holds", cfg.clone());
    let a = new_file(&mut w, b"a");
    let old = data(1, FILE_BYTES);
    w.write(a, 0, &old).unwrap();
    let held = w.checkpoint().unwrap();
    let w = Arc::new(Mutex::new(w));

    // Held before the writer's next checkpoint: with nothing protected,
    // that one gives `held` up.
    let hold = ReaderHold::take(&t, held, 120).unwrap();
    // Holds that count for nothing: expired, on a checkpoint that does
    // not exist, unparsable.
    let expired = Hold {
        expires: readers::now_secs() - readers::SKEW_SECS - 10,
        ..Hold::new(held, 0, 0)
    };
    readers::put_hold(&t, &rt, "00000000000000e1", &expired).unwrap();
    readers::put_hold(
        &t,
        &rt,
        "00000000000000e2",
        &Hold::new(9999, 0, u64::MAX / 2),
    )
    .unwrap();
    rt.block_on(
        t.store
            .put(&t.path("readers/garbage"), PutPayload::from(&b"{"[..])),
    )
    .unwrap();

    let mut writer = Writer::new(&t, 120).unwrap();
    writer.round(&w).unwrap();
    assert_eq!(is_snapshot(&w, held), Some(true), "promoted for the hold");
    assert_eq!(
        readers::read_promoted(&t, &rt).unwrap(),
        BTreeSet::from([held])
    );
    let st = writer.status.lock().unwrap().clone();
    assert_eq!(st.held.get(&held), Some(&1));
    assert!(!st.held.contains_key(&9999));
    assert_eq!((st.promotions, st.demotions), (1, 0));
    let users = w.lock().unwrap().snapshot_create().unwrap();

    // A reader of the held checkpoint, while the writer rewrites the file
    // over and over with nothing protected.
    let mut rc = cfg.clone();
    rc.store.read_only = true;
    rc.checkpoint = Some(held);
    let mut r = Lsfs::open(
        Box::new(ObjectDevice::open(&t, false, 8 << 20).unwrap()),
        rc,
    )
    .unwrap();
    for round in 0..20u8 {
        let mut g = w.lock().unwrap();
        g.write(a, 0, &data(round + 3, FILE_BYTES)).unwrap();
        g.checkpoint().unwrap();
    }
    writer.round(&w).unwrap();
    assert_eq!(is_snapshot(&w, held), Some(true));
    assert!(
        r.read(a, 0, FILE_BYTES as u32).unwrap() == old,
        "the held checkpoint reads back"
    );
    drop(r);

    // The reader goes; a writer mounted later (a new `Writer`, knowing
    // only `readers-promoted`) demotes the snapshot, not the user's.
    drop(hold);
    drop(writer);
    let mut later = Writer::new(&t, 120).unwrap();
    later.round(&w).unwrap();
    assert_ne!(is_snapshot(&w, held), Some(true), "demoted once unheld");
    assert_eq!(is_snapshot(&w, users), Some(true), "the user's snapshot");
    assert!(readers::read_promoted(&t, &rt).unwrap().is_empty());
    assert_eq!(later.status.lock().unwrap().demotions, 1);

    // A snapshot the user made is held and let go: never demoted.
    let h2 = ReaderHold::take(&t, users, 120).unwrap();
    later.round(&w).unwrap();
    drop(h2);
    later.round(&w).unwrap();
    assert_eq!(is_snapshot(&w, users), Some(true));
    assert!(readers::read_promoted(&t, &rt).unwrap().is_empty());
    let w = Arc::try_unwrap(w).ok().unwrap().into_inner().unwrap();
    let mut w = w;
    w.unmount().unwrap();
}
