//! Invariant checks after each checkpoint: fsck's checks of the current
//! file system (`fsck::check_mounted`) run on the in-memory state a
//! checkpoint just wrote, and a violation panics at the checkpoint that
//! made it, not at the next fsck.
//!
//! They cost a walk of every tree per checkpoint, and they are not free of
//! effects: they read through the store's cache, and what they leave there
//! reaches later choices. With them on, `tests/dat_reuse.rs` sees its DAT
//! grow past its bound (18,369 entries on a device of 16,128 blocks, where
//! the run without them stays under it). So they are never on unasked, in
//! no build:
//! `LSFS_CHECK_CHECKPOINTS=1` turns them on for every mount of the process
//! (any build, release test runs included), or a mount sets
//! [`Lsfs::check_checkpoints`] itself, as the tests below do.

use super::Lsfs;

/// Whether new mounts check after each checkpoint (see the module comment).
pub(super) fn on_by_default() -> bool {
    std::env::var("LSFS_CHECK_CHECKPOINTS").as_deref() == Ok("1")
}

impl Lsfs {
    /// Panic if checkpoint `cno` left the file system breaking an invariant.
    pub(super) fn check_after_checkpoint(&mut self, cno: u64) {
        if !self.check_checkpoints {
            return;
        }
        let problems = crate::fsck::check_mounted(&mut self.store);
        assert!(
            problems.is_empty(),
            "checkpoint {cno} left the file system inconsistent ({} problems):\n{}",
            problems.len(),
            problems.join("\n")
        );
        self.check_delete_queue();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::fs::MountConfig;
    use crate::meta::open::MkfsOptions;
    use lsfs_vfs::{Ctx, Vfs, RENAME_EXCHANGE, ROOT_INO};

    fn checked_fs() -> Lsfs {
        let opts = MkfsOptions {
            segment_blocks: 256,
            label: "inv".into(),
        };
        let mut fs = Lsfs::mkfs(
            Box::new(MemDevice::new(32 << 20)),
            &opts,
            MountConfig::default(),
        )
        .unwrap();
        fs.check_checkpoints = true;
        fs
    }

    fn ctx() -> Ctx {
        Ctx {
            uid: 0,
            gid: 0,
            pid: 0,
            umask: 0o022,
        }
    }

    /// Every kind of change, a checkpoint after each step: none may trip
    /// the checks (they would panic).
    #[test]
    fn a_busy_workload_passes_after_every_checkpoint() {
        let mut fs = checked_fs();
        let c = ctx();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, &c).unwrap();
        let e = fs.mkdir(d.ino, b"e", 0o755, &c).unwrap();
        let f = fs.mknod(d.ino, b"f", libc::S_IFREG | 0o644, 0, &c).unwrap();
        fs.write(f.ino, 0, &vec![7u8; 300_000]).unwrap();
        fs.checkpoint().unwrap();
        for i in 0..40u32 {
            let g = fs
                .mknod(
                    e.ino,
                    format!("g{i}").as_bytes(),
                    libc::S_IFREG | 0o600,
                    0,
                    &c,
                )
                .unwrap();
            fs.write(g.ino, 0, &i.to_le_bytes().repeat(100 + i as usize))
                .unwrap();
            if i % 4 == 0 {
                fs.setxattr(g.ino, b"user.k", b"v", 0).unwrap();
            }
        }
        fs.checkpoint().unwrap();
        fs.snapshot_create().unwrap();
        fs.link(f.ino, ROOT_INO, b"f-link").unwrap();
        fs.symlink(ROOT_INO, b"s", b"d/f", &c).unwrap();
        fs.rename(d.ino, b"e", ROOT_INO, b"e2", 0).unwrap();
        fs.rename(ROOT_INO, b"e2", ROOT_INO, b"d", RENAME_EXCHANGE)
            .unwrap();
        fs.checkpoint().unwrap();
        // Unlinked while open: an orphan across a checkpoint.
        fs.open(f.ino, libc::O_RDWR).unwrap();
        fs.unlink(ROOT_INO, b"f-link").unwrap();
        let dir_of_f = fs.lookup(ROOT_INO, b"e2").unwrap().ino;
        fs.unlink(dir_of_f, b"f").unwrap();
        fs.checkpoint().unwrap();
        fs.release(f.ino);
        for i in (0..40).step_by(2) {
            fs.unlink(e.ino, format!("g{i}").as_bytes()).unwrap();
        }
        fs.checkpoint().unwrap();
        fs.unmount().unwrap();
    }

    /// A link count the namespace does not back is caught at the checkpoint.
    #[test]
    fn a_wrong_link_count_panics_at_the_checkpoint() {
        let mut fs = checked_fs();
        let f = fs
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        fs.checkpoint().unwrap();
        let mut i = fs.get(f.ino).unwrap();
        i.nlink += 1;
        fs.put(i);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.checkpoint()));
        let msg = match r {
            Ok(_) => panic!("the checkpoint passed its checks"),
            Err(p) => p.downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        assert!(msg.contains("left the file system inconsistent"), "{msg}");
        assert!(
            msg.contains(&format!(
                "inode {} has nlink 2 but 1 directory entries",
                f.ino
            )),
            "{msg}"
        );
    }

    /// Turned off, the same damage passes unnoticed: the checks are what
    /// caught it.
    #[test]
    fn off_means_no_checks() {
        let mut fs = checked_fs();
        fs.check_checkpoints = false;
        let f = fs
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        let mut i = fs.get(f.ino).unwrap();
        i.nlink += 1;
        fs.put(i);
        fs.checkpoint().unwrap();
    }
}
