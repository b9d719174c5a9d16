//! Operations that touch more blocks than the cache holds: one large write,
//! deleting and truncating a file much larger than the cache. They must
//! work (no panic, no error), and leave a clean image.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::Lsfs;
use lsfs_vfs::{SetAttr, Vfs, ROOT_INO};

#[test]
fn files_larger_than_the_cache_can_be_written_truncated_and_deleted() {
    // 64 blocks is the smallest cache (it holds up to 128 dirty blocks);
    // freeing the 100 MiB file dirties 200 DAT blocks, one per 128 blocks.
    let mut c = cfg();
    c.store.cache_blocks = 64;
    let mut fs = mkfs(160 * MIB, c.clone());
    let ctx = ctx();
    let mut inos = Vec::new();
    for (name, mib) in [(&b"a"[..], 100), (b"b", 8)] {
        let data = pattern(1, mib * MIB as usize);
        let f = fs
            .mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx)
            .unwrap();
        fs.forget(f.ino, 1);
        // One call writes it all: far more than the cache.
        fs.write(f.ino, 0, &data).unwrap();
        inos.push(f.ino);
    }
    fs.checkpoint().unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.setattr(
        inos[1],
        &SetAttr {
            size: Some(4096 * 3 + 5),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.unmount().unwrap();
    let bytes = image(&mut fs);
    drop(fs);
    assert_clean(&fsck_bytes(bytes.clone()), "after deleting big files");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), c).unwrap();
    assert_eq!(
        fs.lookup(ROOT_INO, b"a").map(|_| ()),
        Err(lsfs_vfs::Errno::NOENT)
    );
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    assert_eq!(b.size, 4096 * 3 + 5);
    assert!(fs.read(b.ino, 0, 1 << 20).unwrap() == pattern(1, 4096 * 3 + 5));
}
