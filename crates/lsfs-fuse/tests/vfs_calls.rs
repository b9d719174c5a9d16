//! What the adapter asks of the `Vfs` beyond single requests (a sync at
//! unmount), and what users see when the `Vfs` fails: its errno, or EIO
//! after a panic (the mount stays up and unmounts cleanly, no hang).

mod common;

use std::fs;

use common::faulty::FaultyMemFs;
use common::{fuse_available, TestMount};

/// Looking up "boom" panics, creating "full*" fails with ENOSPC.
fn trapped() -> FaultyMemFs {
    FaultyMemFs {
        panic_on_lookup: Some(b"boom"),
        nospc_prefix: Some(b"full"),
        ..FaultyMemFs::default()
    }
}

#[test]
fn vfs_errors_reach_the_caller_and_a_panic_becomes_eio() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(trapped());
    let root = mount.root();
    fs::write(root.join("before"), b"ok").unwrap();
    assert_eq!(
        fs::write(root.join("full-disk"), b"")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOSPC)
    );
    assert_eq!(
        fs::metadata(root.join("boom")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    // The state may be inconsistent after a panic: every later request
    // fails too, visibly, rather than serving possibly wrong data. (What
    // the kernel cached before the panic, such as the contents of "before",
    // it still serves without asking: that was right when it was cached.)
    assert_eq!(
        fs::metadata(root.join("after")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        fs::write(root.join("before"), b"changed")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EIO)
    );
    assert!(mount.vfs.is_poisoned());
    mount.unmount();
}

#[test]
fn unmount_syncs_the_vfs() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(trapped());
    fs::write(mount.root().join("f"), b"data").unwrap();
    let vfs = mount.vfs.clone();
    assert_eq!(vfs.lock().unwrap().syncs, 0);
    mount.unmount();
    assert_eq!(vfs.lock().unwrap().syncs, 1, "one sync at unmount");
}
