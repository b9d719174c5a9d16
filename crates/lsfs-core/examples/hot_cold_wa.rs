//! Write amplification of the engine's cleaner on Rohner's hot/cold
//! workload, in process (no FUSE): one-block files, 10 % of them receive
//! 90 % of the overwrites.
//!
//! `cargo run --release -p lsfs-core --example hot_cold_wa -- POLICY STREAMS [UTIL] [ROUNDS] [MIB] [SEGMENT_BLOCKS] [WRITES_PER_SEC] [REMOUNT_EVERY] [THREADED] [ACCESS] [FILE_BLOCKS]`
//! POLICY: timestamp, greedy, cost-benefit, cost-hotness, balanced;
//! STREAMS: on or off; UTIL: share of the usable blocks filled with files
//! (default 0.8); ROUNDS: overwrites in multiples of the file count
//! (default 8); MIB: device size (default 128); SEGMENT_BLOCKS: blocks per
//! segment (default 256); WRITES_PER_SEC: overwrites per second of the
//! simulated clock, which schedules the 5 s checkpoints (default 64; the
//! mounted benchmark paces 1,500); REMOUNT_EVERY: unmount and mount again
//! after this many overwrites (default 0: never), which starts each mount
//! without write history; THREADED: threaded logging off, adaptive (the
//! default) or always; ACCESS: hot-cold (default) or uniform (every file
//! equally likely); FILE_BLOCKS: blocks per file, each overwrite rewrites a
//! whole file (default 1). Cleaner settings are the defaults, except that
//! background passes are off: they are scheduled by wall-clock time, which
//! would make the result depend on how fast this machine runs; the write
//! path's cleaning below the low-water mark does all the work. Prints one
//! JSON line, with three write amplifications (the engine's, which counts
//! metadata as user writes; Rohner's on file data alone; and everything
//! the log wrote per block the application wrote), the blocks written by
//! class (file data, ifile, DAT, ...), the DAT blocks dirtied by cause, the
//! DAT's size and entries reused, what the cleaner did per stream, and per
//! stream at the end [segments, blocks, live blocks]; and the write cost
//! in sequential block writes per overwrite (blocks appended, victims read
//! by the cleaner, and R per block written into a hole), the simulator's
//! measure (docs/CLEANER.md §5).

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let policy = args
        .first()
        .cloned()
        .unwrap_or_else(|| "cost-benefit".into());
    let streams = args.get(1).map(|s| s == "on").unwrap_or(true);
    let util: f64 = args.get(2).map(|s| s.parse().expect("UTIL")).unwrap_or(0.8);
    let rounds: f64 = args
        .get(3)
        .map(|s| s.parse().expect("ROUNDS"))
        .unwrap_or(8.0);
    let mib: u64 = args.get(4).map(|s| s.parse().expect("MIB")).unwrap_or(128);
    let segment_blocks: u32 = args
        .get(5)
        .map(|s| s.parse().expect("SEGMENT_BLOCKS"))
        .unwrap_or(256);
    let per_sec: usize = args
        .get(6)
        .map(|s| s.parse().expect("WRITES_PER_SEC"))
        .unwrap_or(64);
    let remount_every: usize = args
        .get(7)
        .map(|s| s.parse().expect("REMOUNT_EVERY"))
        .unwrap_or(0);
    let threaded = args.get(8).cloned().unwrap_or_else(|| "adaptive".into());
    let uniform = match args.get(9).map(String::as_str) {
        None | Some("hot-cold") => false,
        Some("uniform") => true,
        Some(other) => panic!("ACCESS {other:?}: hot-cold or uniform"),
    };
    let file_blocks: usize = args
        .get(10)
        .map(|s| s.parse().expect("FILE_BLOCKS"))
        .unwrap_or(1);
    let mut config = MountConfig::default();
    config.cleaner.threaded_logging = threaded.parse().unwrap_or_else(|e| panic!("{e}"));
    config
        .cleaner
        .validate()
        .expect("THREADED: off, adaptive or always");
    config.store.protection_secs = 0;
    config.store.cache_blocks = 4096;
    config.store.streams = streams;
    config.cleaner.policy = lsfs_core::gc::parse_policy(&policy).unwrap_or_else(|e| panic!("{e}"));
    config.cleaner.check_interval_secs = 3600;
    config.cleaner.idle_secs = 0;
    let opts = MkfsOptions {
        segment_blocks,
        label: "wa".into(),
    };
    let mut fs =
        Lsfs::mkfs(Box::new(MemDevice::new(mib << 20)), &opts, config.clone()).expect("mkfs");
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let ctx = Ctx::default();
    // A one-block file costs about 1.14 blocks with its inode and DAT entry.
    let nfiles = (fs.store.free_blocks() as f64 * util / (file_blocks as f64 + 0.14)) as usize;
    let mut inos = Vec::with_capacity(nfiles);
    for f in 0..nfiles {
        let a = fs
            .mknod(
                ROOT_INO,
                format!("f{f}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                &ctx,
            )
            .expect("create");
        fs.write(a.ino, 0, &vec![f as u8; 4096 * file_blocks])
            .expect("fill");
        inos.push(a.ino);
    }
    fs.checkpoint().expect("checkpoint");
    // Counters are per mount: each mount's are added up at its end.
    let mut base_written = fs.store.stats().payload_blocks_written;
    let mut base_copied = fs.cleaner.stats.blocks_copied;
    let (mut acc_written, mut acc_copied, mut acc_data, mut remounts) = (0, 0, 0, 0u64);
    let (mut acc_read, mut acc_plugged, mut acc_prepared) = (0, 0, 0);
    let read_blocks =
        |fs: &Lsfs| -> u64 { fs.cleaner.stats.by_stream.values().map(|t| t.blocks).sum() };
    let mut base_read = read_blocks(&fs);
    let data_blocks = |fs: &Lsfs| {
        fs.store
            .stats()
            .blocks_by_class
            .get(lsfs_core::log::record::FILE_DATA)
            .copied()
            .unwrap_or(0)
    };
    let mut base_data = data_blocks(&fs);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let hot = nfiles / 10;
    let writes = (nfiles as f64 * rounds) as usize;
    for i in 0..writes {
        let f = if uniform {
            rng.gen_range(0..nfiles)
        } else if rng.gen_bool(0.9) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(hot..nfiles)
        };
        fs.write(inos[f], 0, &vec![(i % 251) as u8; 4096 * file_blocks])
            .unwrap_or_else(|e| {
                let u = &fs.store.segs().usage;
                let live: u64 = u.iter().map(|x| x.nlive as u64).sum();
                let mut c: Vec<(u32, u32)> = fs
                    .store
                    .cleanable_segments()
                    .iter()
                    .map(|c| (c.nlive, c.nblocks))
                    .collect();
                c.sort();
                panic!(
                    "write {i} of {writes}: {e:?} (store failed: {:?}): live {live} of {} blocks, free segments {}, free blocks {}, cleanable (live, blocks) {:?}, stats {:?}",
                    fs.store.failure(),
                    fs.store.geo().total_segment_blocks(),
                    fs.store.segs().free_count(),
                    fs.store.free_blocks(),
                    &c[..c.len().min(12)],
                    fs.cleaner.stats
                )
            });
        if remount_every > 0 && (i + 1) % remount_every == 0 {
            fs.unmount().expect("unmount");
            acc_written += fs.store.stats().payload_blocks_written - base_written;
            acc_copied += fs.cleaner.stats.blocks_copied - base_copied;
            acc_data += data_blocks(&fs) - base_data;
            acc_read += read_blocks(&fs) - base_read;
            acc_plugged += fs.store.plugs().stats().blocks_plugged;
            acc_prepared += fs.store.plugs().stats().segments_prepared;
            let img = fs.store.dev_bytes_for_test();
            fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), config.clone()).expect("mount");
            fs.clock().set_secs(t0 + 1 + (i / per_sec) as u64);
            base_written = fs.store.stats().payload_blocks_written;
            base_copied = fs.cleaner.stats.blocks_copied;
            base_data = data_blocks(&fs);
            base_read = read_blocks(&fs);
            remounts += 1;
        }
        if i % 64 == 0 {
            fs.clock().set_secs(t0 + 1 + (i / per_sec) as u64);
            fs.tick().expect("tick");
        }
    }
    fs.checkpoint().expect("checkpoint");
    let written = acc_written + fs.store.stats().payload_blocks_written - base_written;
    let copied = acc_copied + fs.cleaner.stats.blocks_copied - base_copied;
    let user = written - copied;
    let data_written = acc_data + data_blocks(&fs) - base_data;
    let cleaner_read = acc_read + read_blocks(&fs) - base_read;
    let plugged = acc_plugged + fs.store.plugs().stats().blocks_plugged;
    let r = fs.cleaner.config.random_write_cost;
    let write_cost = (written + cleaner_read) as f64 + (r - 1.0) * plugged as f64;
    let app_blocks = (writes * file_blocks).max(1);
    // Per stream at the end: segments, blocks written, live blocks.
    let mut streams_at_end = std::collections::BTreeMap::new();
    for u in fs.store.segs().usage.iter().filter(|u| u.nblocks > 0) {
        let e = streams_at_end
            .entry(lsfs_core::meta::stream::Stream::from_flags(u.flags).name())
            .or_insert([0u64; 3]);
        e[0] += 1;
        e[1] += u.nblocks as u64;
        e[2] += u.nlive as u64;
    }
    let hist = fs.store.utilization_histogram();
    let used: u64 = hist.iter().sum();
    println!(
        "{}",
        serde_json::json!({
            "policy": policy,
            "streams": streams,
            "threaded": threaded,
            "access": if uniform { "uniform" } else { "hot-cold" },
            "blocks_plugged": plugged,
            "plug_stats_last_mount": fs.store.plugs().stats(),
            "passes": fs.cleaner.stats.passes,
            "segments_plugged": acc_prepared + fs.store.plugs().stats().segments_prepared,
            "cleaner_read": cleaner_read,
            "write_cost": write_cost / app_blocks as f64,
            "data_write_cost": ((data_written + cleaner_read) as f64 + (r - 1.0) * plugged as f64) / app_blocks as f64,
            "util": util,
            "files": nfiles,
            "overwrites": writes,
            "remounts": remounts,
            "blocks_written": written,
            "cleaner_copied": copied,
            "write_amplification": written as f64 / user.max(1) as f64,
            "file_blocks": file_blocks,
            "data_write_amplification": data_written as f64 / app_blocks as f64,
            "log_blocks_per_app_block": written as f64 / app_blocks as f64,
            "stream_blocks": fs.store.streams().blocks_written,
            "segments_used": used,
            "by_stream": fs.cleaner.stats.by_stream,
            "by_class": fs.store.stats().blocks_by_class,
            "dat_blocks_dirtied": fs.store.stats().dat_blocks_dirtied,
            "next_vblock": fs.store.roots().next_vblock,
            "dat_blocks": fs.store.dat_blocks_in_use().expect("DAT walk"),
            "dat_entries_reused": fs.store.stats().dat_entries_reused,
            "streams_at_end": streams_at_end,
            "checkpoints": fs.store.stats().checkpoints_written,
            "live_share": fs.store.segs().usage.iter().map(|u| u.nlive as u64).sum::<u64>() as f64 / fs.store.geo().total_segment_blocks() as f64,
        })
    );
}
