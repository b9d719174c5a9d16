//! `lsfs fsck` and `lsfs inspect`: offline tools that open the image directly.

use lsfs_core::device::BlockDevice;
use lsfs_core::inspect;
use std::path::Path;

fn open(image: &Path) -> Result<Box<dyn BlockDevice>, String> {
    crate::device_target::open(image, false)
}

/// Check an image; exit status as e2fsck: 0 clean, 4 errors left, 8 could not check.
pub fn fsck(image: &Path, json: bool) -> Result<u8, String> {
    let dev = open(image)?;
    let mut report = match lsfs_core::fsck::fsck(dev) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lsfs fsck: {}: {e}", image.display());
            return Ok(8);
        }
    };
    if let Some(url) = crate::device_target::object_url(image) {
        // Records a mount kept in the store (object_wal=store) and a
        // crash left: acknowledged writes this check did not see.
        let n = lsfs_object::store_log::pending(&lsfs_object::Target::parse(url)?)?;
        if n > 0 {
            report.warnings.push(format!(
                "{n} flush records wait in the store (log/): writes a mount acknowledged that \
                 are not in its segments yet, so this check did not see them; the next \
                 read-write mount stores them"
            ));
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        for w in &report.warnings {
            println!("warning: {w}");
        }
        for e in &report.errors {
            println!("error: {e}");
        }
        let s = &report.stats;
        // Unlinked files still open, or deleted ones not yet freed: the
        // next mount frees them.
        let orphans = if s.orphans > 0 {
            format!(
                " ({} orphans holding {} blocks, freed at the next mount)",
                s.orphans, s.orphan_blocks
            )
        } else {
            String::new()
        };
        // Only on images with clones: the line stays as it was elsewhere.
        let shared = if s.shared_blocks > 0 {
            format!(" ({} shared by clones)", s.shared_blocks)
        } else {
            String::new()
        };
        println!(
            "{}: {} — checkpoint {}, {} inodes ({} dirs, {} files){orphans}, {} live blocks{shared}, {} checkpoints ({} snapshots), {} fsync records rolled forward",
            image.display(),
            if report.is_clean() { "clean" } else { "ERRORS" },
            s.cno,
            s.inodes,
            s.directories,
            s.regular_files,
            s.current_blocks,
            s.checkpoints,
            s.snapshots,
            s.replayed_records
        );
    }
    Ok(if report.is_clean() { 0 } else { 4 })
}

pub enum What {
    Superblock,
    Segments { all: bool },
    Checkpoints,
    DumpSegment(u64),
}

pub fn inspect(image: &Path, what: What, json: bool) -> Result<(), String> {
    let e = |e: lsfs_core::Error| e.to_string();
    let mut dev = open(image)?;
    let out = |v: serde_json::Value| println!("{v}");
    match what {
        What::Superblock => {
            let copies = inspect::superblock(dev.as_mut()).map_err(e)?;
            if json {
                out(serde_json::to_value(&copies).unwrap());
                return Ok(());
            }
            for c in copies {
                match (&c.superblock, &c.error) {
                    (Some(sb), _) => println!(
                        "block {}: {}",
                        c.block,
                        serde_json::to_string_pretty(sb).unwrap()
                    ),
                    (None, Some(err)) => println!("block {}: INVALID: {err}", c.block),
                    _ => {}
                }
            }
        }
        What::Segments { all } => {
            let segs = inspect::segments(dev).map_err(e)?;
            if json {
                out(serde_json::to_value(&segs).unwrap());
                return Ok(());
            }
            println!(
                "{:>8} {:>12} {:>7} {:>7} {:>9}  {:<20} STATE",
                "SEGNUM", "BLOCK", "NBLOCKS", "NLIVE", "NSNAPSHOT", "LASTMOD"
            );
            for s in segs.iter().filter(|s| all || s.state != "free") {
                println!(
                    "{:>8} {:>12} {:>7} {:>7} {:>9}  {:<20} {}",
                    s.segno, s.first_block, s.nblocks, s.nlive, s.nsnapshot, s.lastmod, s.state
                );
            }
        }
        What::Checkpoints => {
            let cps = inspect::checkpoints(dev).map_err(e)?;
            if json {
                out(serde_json::to_value(&cps).unwrap());
                return Ok(());
            }
            println!(
                "{:>10}  {:<20}  {:<10}  {:>10}  {:>12}",
                "CNO", "DATE", "MODE", "INODES", "BLOCKS"
            );
            for c in cps {
                println!(
                    "{:>10}  {:<20}  {:<10}  {:>10}  {:>12}",
                    c.cno,
                    c.date,
                    if c.snapshot { "ss" } else { "cp" },
                    c.inodes,
                    c.blocks
                );
            }
        }
        What::DumpSegment(n) => {
            let d = inspect::dump_segment(dev.as_mut(), n).map_err(e)?;
            if json {
                out(serde_json::to_value(&d).unwrap());
                return Ok(());
            }
            println!(
                "segment {} (first block {}): {} records",
                d.segno,
                d.first_block,
                d.records.len()
            );
            for r in d.records {
                println!(
                    "  record at block {}: seq {} cno {} flags [{}] {} blocks ({} summary) next segment {}",
                    r.block,
                    r.seq,
                    r.cno,
                    r.flag_names.join(","),
                    r.nblocks,
                    r.nsum_blocks,
                    r.next_seg
                );
                for en in r.entries {
                    println!(
                        "    block {:>10}  {:<10} ino {:>8} offset {:>10} vblock {:>10} cno {}",
                        en.block, en.kind, en.ino, en.offset, en.vblock, en.cno
                    );
                }
                if r.inline_bytes > 0 {
                    println!("    {} bytes of inline items:", r.inline_bytes);
                    for it in r.items {
                        println!("      {it}");
                    }
                }
            }
        }
    }
    Ok(())
}
