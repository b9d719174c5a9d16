//! `lsfs migrate SRC DST`: copy an unmounted file system to another kind
//! of device, an image file into an object store or back
//! (docs/OBJECT_STORE.md, "Moving a file system").
//!
//! The copy is block for block: both devices lay the file system out the
//! same way (block 0 and the last block are the superblocks, segments in
//! between; an object store keeps each segment as one object), so the
//! copy is the same file system, with its checkpoints, snapshots and
//! identity, and mounts wherever the source did. Blocks that are all
//! zeros are not written to a destination that reads unwritten blocks as
//! zeros (a new, sparse image file, or an object store, where a missing
//! object reads as zeros): a file system's free segments cost nothing to
//! move. Nothing may write the source meanwhile: an image file is opened
//! with the shared lock a read-write mount refuses, and an object store's
//! lease is taken as a writer's would be. The copy is checked with fsck
//! before the command says it is done.

use crate::device_target;
use clap::Args;
use lsfs_core::device::{BlockDevice, FileDevice};
use serde_json::json;
use std::io::IsTerminal;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct MigrateArgs {
    /// The file system to copy, unmounted (or mounted read-only): an image
    /// file or block device, or an object store URL (s3://BUCKET/PREFIX,
    /// file:///DIR).
    src: PathBuf,
    /// Where to copy it: a new image file, a block device of exactly the
    /// source's size, or an object store URL.
    dst: PathBuf,
    /// Overwrite a file system (or any file) already at DST.
    #[arg(long)]
    force: bool,
    /// Do not check the copy with fsck.
    #[arg(long)]
    no_check: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What a migration did.
struct Copied {
    /// Ranges of the layout (the superblock areas and each segment) and
    /// those written; the others were zeros, left unwritten.
    ranges: u64,
    ranges_written: u64,
    bytes_read: u64,
    bytes_written: u64,
}

pub fn run(a: MigrateArgs) -> Result<(), String> {
    if a.src == a.dst {
        return Err(format!("SRC and DST are both {}", a.src.display()));
    }
    // An object store's reader takes no lease, so only a writer's open
    // keeps another writer out while the copy runs.
    let src_is_object = device_target::object_url(&a.src).is_some();
    let mut src = device_target::open(&a.src, src_is_object)
        .map_err(|e| format!("SRC {}: {e}", a.src.display()))?;
    let sb = lsfs_core::inspect::newest_superblock(src.as_mut())
        .map_err(|e| format!("SRC {}: {e}", a.src.display()))?;
    let geo = sb.geometry();
    let size = geo.device_blocks * geo.block_bytes as u64;
    if src.size_bytes() != size {
        return Err(format!(
            "SRC {}: the device holds {} bytes, its superblock says {size}",
            a.src.display(),
            src.size_bytes()
        ));
    }
    let (mut dst, sparse) = create_destination(&a, size, geo.segment_blocks as u64 * 4096)?;
    let copied = copy(src.as_mut(), dst.as_mut(), &geo, sparse, !a.json)
        .map_err(|e| format!("copying {} to {}: {e}", a.src.display(), a.dst.display()))?;
    dst.release().map_err(|e| e.to_string())?;
    drop(dst);
    src.release().map_err(|e| e.to_string())?;
    drop(src);
    let checked = if a.no_check {
        None
    } else {
        Some(check(&a.dst)?)
    };
    if a.json {
        println!(
            "{}",
            json!({
                "src": a.src,
                "dst": a.dst,
                "fs_id": sb.fs_id,
                "device_bytes": size,
                "segment_bytes": geo.segment_blocks as u64 * 4096,
                "ranges": copied.ranges,
                "ranges_written": copied.ranges_written,
                "bytes_read": copied.bytes_read,
                "bytes_written": copied.bytes_written,
                "fsck": checked,
            })
        );
    } else {
        println!(
            "copied {} to {}: {} of {} segments and superblock areas written ({} MiB of {} MiB), {}",
            a.src.display(),
            a.dst.display(),
            copied.ranges_written,
            copied.ranges,
            copied.bytes_written >> 20,
            size >> 20,
            match checked {
                Some(s) => format!("fsck {s}"),
                None => "not checked".to_string(),
            }
        );
    }
    Ok(())
}

/// Make the device `a.dst` names for a file system of `size` bytes in
/// segments of `segment_bytes`, and open it for writing; also whether
/// its unwritten blocks read as zeros.
fn create_destination(
    a: &MigrateArgs,
    size: u64,
    segment_bytes: u64,
) -> Result<(Box<dyn BlockDevice>, bool), String> {
    let name = format!("DST {}", a.dst.display());
    if crate::looks_like_lsfs(&a.dst) && !a.force {
        return Err(format!(
            "{name} already holds an lsfs file system; use --force to overwrite it"
        ));
    }
    if let Some(url) = device_target::object_url(&a.dst) {
        device_target::create_object(url, size, segment_bytes, a.force)
            .map_err(|e| format!("{name}: {e}"))?;
        let dev = device_target::open(&a.dst, true).map_err(|e| format!("{name}: {e}"))?;
        return Ok((dev, true));
    }
    let meta = std::fs::metadata(&a.dst);
    if meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) {
        // Every block is written: a block device holds what it held.
        let dev = FileDevice::open(&a.dst, true).map_err(|e| format!("{name}: {e}"))?;
        if dev.size_bytes() != size {
            return Err(format!(
                "{name}: the device holds {} bytes; the file system needs exactly {size}",
                dev.size_bytes()
            ));
        }
        return Ok((Box::new(dev), false));
    }
    if meta.is_ok() {
        if !a.force {
            return Err(format!("{name} exists; use --force to replace it"));
        }
        std::fs::remove_file(&a.dst).map_err(|e| format!("{name}: {e}"))?;
    }
    FileDevice::create_image(&a.dst, size).map_err(|e| format!("{name}: {e}"))?;
    let dev = FileDevice::open(&a.dst, true).map_err(|e| format!("{name}: {e}"))?;
    Ok((Box::new(dev), true))
}

/// Copy every range of the layout from `src` to `dst`: the blocks before
/// the first segment, each segment, and the blocks after the last one
/// (the second superblock among them). All-zero ranges are skipped when
/// `sparse`. Flushes `dst` at the end.
fn copy(
    src: &mut dyn BlockDevice,
    dst: &mut dyn BlockDevice,
    geo: &lsfs_core::layout::Geometry,
    sparse: bool,
    progress: bool,
) -> lsfs_core::error::Result<Copied> {
    let seg = geo.segment_blocks as u64;
    let after_segments = geo.first_segment_block + geo.nsegments * seg;
    let mut ranges = vec![(0, geo.first_segment_block)];
    ranges.extend((0..geo.nsegments).map(|s| (geo.segment_start(s), seg)));
    ranges.push((after_segments, geo.device_blocks - after_segments));
    assert_eq!(
        ranges.iter().map(|r| r.1).sum::<u64>(),
        geo.device_blocks,
        "the ranges cover the device"
    );
    let visible = progress && std::io::stderr().is_terminal();
    let bar = lsfs_sim::progress::progress_bar(ranges.len() as u64, "migrate", visible);
    let mut c = Copied {
        ranges: ranges.len() as u64,
        ranges_written: 0,
        bytes_read: 0,
        bytes_written: 0,
    };
    let mut buf = Vec::new();
    for (first, blocks) in ranges {
        let at = geo.byte_offset(first);
        buf.resize((blocks * geo.block_bytes as u64) as usize, 0);
        src.read_at(at, &mut buf)?;
        c.bytes_read += buf.len() as u64;
        if !(sparse && buf.iter().all(|&b| b == 0)) {
            dst.write_at(at, &buf)?;
            c.ranges_written += 1;
            c.bytes_written += buf.len() as u64;
        }
        bar.inc(1);
    }
    dst.flush()?;
    bar.finish_and_clear();
    Ok(c)
}

/// fsck of the copy: "clean", or an error naming what is wrong.
fn check(dst: &Path) -> Result<&'static str, String> {
    let dev = device_target::open(dst, false).map_err(|e| format!("DST {}: {e}", dst.display()))?;
    let report = lsfs_core::fsck::fsck(dev)
        .map_err(|e| format!("fsck of the copy {}: {e}", dst.display()))?;
    if report.is_clean() {
        Ok("clean")
    } else {
        Err(format!(
            "fsck of the copy {} found errors: {}",
            dst.display(),
            report.errors.join("; ")
        ))
    }
}
