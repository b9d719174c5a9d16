//! Invariant checks after checkpoints: fsck's checks of the current file
//! system (`fsck::check_mounted`) and of the delete queue run on the
//! in-memory state a checkpoint just wrote, and a violation panics at the
//! checkpoint that made it (or, sampled, at the next one checked), not at
//! the next fsck.
//!
//! They change nothing the engine later sees: they read through
//! [`crate::meta::store::Store::observe`], so blocks the cache does not
//! hold come from the device without entering it, cached ones are read
//! without touching their recency, and neither the cache's counters, the
//! mirror of the DAT's block map, the inode cache nor the device's read
//! counters keep a trace. A mount behaves the same with them on or off
//! (what timing decides aside). A device that counts reads itself, as the
//! fault injector does to fail the n-th, still sees theirs.
//!
//! Which checkpoints are checked ([`CheckpointChecks`]):
//! - debug builds check by default, sampled: after a check that took `d`,
//!   the checkpoints of the next `d` are not checked, so the checks take
//!   at most about half of a run's time. Without the bound, a walk of
//!   every tree per checkpoint made the cleaner and ENOSPC tests six to
//!   seven times slower (the cleaner suite 4.7 s to 32 s) and
//!   `tests/big_files.rs` 35 times (0.9 s to 33 s); sampled, they take
//!   7.7 s and 2.3 s;
//! - `LSFS_CHECK_CHECKPOINTS=1` checks every checkpoint of every mount of
//!   the process, in any build (release test runs included);
//! - `LSFS_CHECK_CHECKPOINTS=0` turns them off (the default in release);
//! - a mount may say itself ([`super::MountConfig::check_checkpoints`]), as
//!   the tests below do, and the tests of damaged images (which are
//!   inconsistent before any checkpoint) turn them off.

use super::Lsfs;
use std::time::Instant;

/// Which checkpoints a mount checks (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointChecks {
    Off,
    /// Within a time budget: at most about half of the time.
    Sampled,
    Every,
}

/// What new mounts do (see the module comment).
pub(super) fn by_default() -> CheckpointChecks {
    match std::env::var("LSFS_CHECK_CHECKPOINTS").as_deref() {
        Ok("0") => CheckpointChecks::Off,
        Ok("1") => CheckpointChecks::Every,
        _ if cfg!(debug_assertions) => CheckpointChecks::Sampled,
        _ => CheckpointChecks::Off,
    }
}

impl Lsfs {
    /// Panic if checkpoint `cno` left the file system breaking an invariant.
    pub(super) fn check_after_checkpoint(&mut self, cno: u64) {
        match self.config.check_checkpoints {
            CheckpointChecks::Off => return,
            CheckpointChecks::Sampled
                if self.checks_resume_at.is_some_and(|t| Instant::now() < t) =>
            {
                return
            }
            _ => {}
        }
        let start = Instant::now();
        let problems = self.store.observe(crate::fsck::check_mounted);
        assert!(
            problems.is_empty(),
            "checkpoint {cno} left the file system inconsistent ({} problems):\n{}",
            problems.len(),
            problems.join("\n")
        );
        self.check_delete_queue();
        self.checks_resume_at = Some(Instant::now() + start.elapsed());
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
        fs.config.check_checkpoints = CheckpointChecks::Every;
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

    /// Every kind of change, a checkpoint after each step.
    fn busy(fs: &mut Lsfs) {
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
    }

    /// None of the busy workload's checkpoints may trip the checks (they
    /// would panic).
    #[test]
    fn a_busy_workload_passes_after_every_checkpoint() {
        let mut fs = checked_fs();
        busy(&mut fs);
        fs.unmount().unwrap();
    }

    /// The checks leave no trace: the same workload on a cache too small
    /// for it does the same I/O and sees the same cache, checked or not.
    #[test]
    fn the_checks_change_nothing() {
        let run = |checks| {
            let opts = MkfsOptions {
                segment_blocks: 256,
                label: "inv".into(),
            };
            let mut config = MountConfig::default();
            config.store.cache_blocks = 64;
            let mut fs = Lsfs::mkfs(Box::new(MemDevice::new(32 << 20)), &opts, config).unwrap();
            fs.config.check_checkpoints = checks;
            busy(&mut fs);
            let c = fs.store.cache();
            let seen = (
                fs.store.device_counters(),
                (c.hits, c.misses, c.len()),
                fs.store.dat_mirror_len(),
                fs.inodes.len(),
            );
            fs.unmount().unwrap();
            seen
        };
        assert_eq!(run(CheckpointChecks::Every), run(CheckpointChecks::Off));
    }

    /// Debug builds check unless told not to; release builds only if told.
    #[test]
    fn debug_builds_check_by_default() {
        if std::env::var_os("LSFS_CHECK_CHECKPOINTS").is_none() {
            let want = if cfg!(debug_assertions) {
                CheckpointChecks::Sampled
            } else {
                CheckpointChecks::Off
            };
            assert_eq!(by_default(), want);
        }
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
        fs.config.check_checkpoints = CheckpointChecks::Off;
        let f = fs
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        let mut i = fs.get(f.ino).unwrap();
        i.nlink += 1;
        fs.put(i);
        fs.checkpoint().unwrap();
    }
}
