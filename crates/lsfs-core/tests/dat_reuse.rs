//! Free DAT entries are handed out again (meta/dat_reuse.rs), so random
//! overwrites leave the DAT dense instead of spreading the live entries of
//! old data over ever more DAT blocks; across remounts and checkpoints the
//! file system stays correct and fsck-clean.

mod common;

use common::{assert_clean, cfg_no_protection, ctx, fsck_bytes, mkfs, pattern, MIB};
use lsfs_core::device::MemDevice;
use lsfs_core::fs::Lsfs;
use lsfs_vfs::{Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

const FILES: usize = 1500;

fn block(f: usize, version: u32) -> Vec<u8> {
    pattern(f as u64 * 1_000_003 + version as u64, 4096)
}

/// Uniform random one-block overwrites, a checkpoint every 50.
fn overwrite(
    fs: &mut Lsfs,
    inos: &[u64],
    versions: &mut [u32],
    n: usize,
    rng: &mut rand::rngs::StdRng,
) {
    for i in 0..n {
        let f = rng.gen_range(0..inos.len());
        versions[f] += 1;
        fs.write(inos[f], 0, &block(f, versions[f])).unwrap();
        if i % 50 == 49 {
            fs.checkpoint().unwrap();
            // A second per checkpoint on a set clock: segment ages rank
            // the cleaner's victims, and the wall clock made the DAT's size
            // depend on the machine's speed (it outgrew its bound on a busy
            // machine).
            fs.clock().advance(std::time::Duration::from_secs(1));
        }
    }
    fs.checkpoint().unwrap();
}

fn check_contents(fs: &mut Lsfs, inos: &[u64], versions: &[u32]) {
    for (f, &ino) in inos.iter().enumerate() {
        assert_eq!(
            fs.read(ino, 0, 4096).unwrap(),
            block(f, versions[f]),
            "file {f}"
        );
    }
}

#[test]
fn random_overwrites_keep_the_dat_dense() {
    let mut fs = mkfs(64 * MIB, cfg_no_protection());
    fs.clock().set_secs(1_700_000_000);
    let inos = common::make_files(&mut fs, FILES, |f| block(f, 0));
    let mut versions = vec![0u32; FILES];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    overwrite(&mut fs, &inos, &mut versions, 20 * FILES, &mut rng);
    let reused = fs.store.stats().dat_entries_reused;
    let dat_blocks = fs.store.dat_blocks_in_use().unwrap();
    // The DAT's blocks in use are bounded by the device, not by the writes
    // ever made: without reuse the 30,000 overwrites took 31,000 fresh
    // numbers and the files' live entries kept most of their DAT blocks
    // alive. The end of the DAT still moves on: the numbers of a DAT block
    // punched out when all its entries died are not handed out again
    // (reusing them would only bring the block back), and with the clock
    // moving as it does here the run punches some. (An earlier bound on the
    // end of the DAT held only when the whole run fell within a second or
    // two of wall time, and failed on a busy machine.)
    let device_blocks = fs.store.geo().total_segment_blocks();
    assert!(reused > (10 * FILES) as u64, "entries reused: {reused}");
    assert!(
        dat_blocks <= device_blocks.div_ceil(128),
        "{dat_blocks} DAT blocks on a device of {device_blocks} blocks"
    );
    check_contents(&mut fs, &inos, &versions);

    // Across a remount the holes are found again (from DAT blocks as they
    // are on disk) and reused; the image stays clean.
    let bytes = common::image(&mut fs);
    drop(fs);
    assert_clean(&fsck_bytes(bytes.clone()), "after reuse");
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg_no_protection()).unwrap();
    fs.clock().set_secs(1_700_100_000);
    check_contents(&mut fs, &inos, &versions);
    let next_before = fs.store.roots().next_vblock;
    overwrite(&mut fs, &inos, &mut versions, 5 * FILES, &mut rng);
    assert!(
        fs.store.stats().dat_entries_reused > (2 * FILES) as u64,
        "after remount only {} entries reused",
        fs.store.stats().dat_entries_reused
    );
    assert!(
        fs.store.roots().next_vblock - next_before < (3 * FILES) as u64,
        "the DAT kept growing at the end after remount: {} new entries",
        fs.store.roots().next_vblock - next_before
    );
    check_contents(&mut fs, &inos, &versions);
    let bytes = common::image(&mut fs);
    drop(fs);
    assert_clean(&fsck_bytes(bytes), "after remount");
}

/// A reused virtual block may sit right before a file's next, older, extent.
/// Joining the two made an extent whose fresh block is followed by one a
/// checkpoint holds, and a later two-block write in the same checkpoint
/// rewrote that block in place (an assertion stopped it).
#[test]
fn a_reused_block_is_not_joined_to_an_older_extent_after_it() {
    let mut fs = mkfs(64 * MIB, cfg_no_protection());
    fs.clock().set_secs(1_700_000_000);
    let mk = |fs: &mut Lsfs, name: &str| {
        fs.mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap()
            .ino
    };
    let (g, f) = (mk(&mut fs, "g"), mk(&mut fs, "f"));
    fs.checkpoint().unwrap();
    // Consecutive numbers: g's block, then f's block 1.
    fs.write(g, 0, &block(0, 0)).unwrap();
    fs.write(f, 4096, &block(1, 0)).unwrap();
    // g's block dies before any checkpoint saw it: its entry is free at once.
    let size0 = lsfs_vfs::SetAttr {
        size: Some(0),
        ..Default::default()
    };
    fs.setattr(g, &size0).unwrap();
    fs.checkpoint().unwrap();
    // f's block 0 takes g's old number, right before f's block 1.
    let reused = fs.store.stats().dat_entries_reused;
    fs.write(f, 0, &block(2, 0)).unwrap();
    assert_eq!(
        fs.store.stats().dat_entries_reused,
        reused + 1,
        "the setup did not reuse an entry"
    );
    let mut both = block(3, 0);
    both.extend(block(4, 0));
    fs.write(f, 0, &both).unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(fs.read(f, 0, 8192).unwrap(), both);
    let bytes = common::image(&mut fs);
    drop(fs);
    assert_clean(&fsck_bytes(bytes), "after the writes");
}
