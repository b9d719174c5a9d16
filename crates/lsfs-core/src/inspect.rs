//! Read-only dumps of an image for `lsfs inspect`: the superblocks, segment
//! usage (like NILFS `lssu`), checkpoints (like `lscp`) and the records of one
//! segment (like `dumpseg`). Every result is serde-serializable, so the CLI
//! prints it as a table or as JSON. Nothing here writes to the device.

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use crate::log::chain::segment_records;
use crate::log::record::{FLAG_CP_BEGIN, FLAG_DSYNC, FLAG_SUPER_ROOT};
use crate::log::superblock::Superblock;
use crate::meta::store::{Store, StoreConfig};
use crate::meta::sufile::{SegUsage, SU_ERROR, SU_PLUGGED};

/// One superblock copy as found on the device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SuperblockCopy {
    /// Device block the copy lives in.
    pub block: u64,
    /// Why it does not decode, if it does not.
    pub error: Option<String>,
    pub superblock: Option<SuperblockView>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct SuperblockView {
    pub version: u32,
    pub features_compat: u32,
    pub features_incompat: u32,
    pub features_ro_compat: u32,
    pub block_bytes: u32,
    pub segment_blocks: u32,
    pub nsegments: u64,
    pub first_segment_block: u64,
    pub device_blocks: u64,
    pub fs_id: String,
    pub created_secs: u64,
    pub created: String,
    pub label: String,
    pub sb_seq: u64,
    pub cp_cno: u64,
    pub cp_record_block: u64,
    pub cp_record_seq: u64,
    pub written_secs: u64,
    pub written: String,
}

impl From<&Superblock> for SuperblockView {
    fn from(s: &Superblock) -> Self {
        SuperblockView {
            version: s.version,
            features_compat: s.features_compat,
            features_incompat: s.features_incompat,
            features_ro_compat: s.features_ro_compat,
            block_bytes: s.block_bytes,
            segment_blocks: s.segment_blocks,
            nsegments: s.nsegments,
            first_segment_block: s.first_segment_block,
            device_blocks: s.device_blocks,
            fs_id: format!("{:016x}", s.fs_id),
            created_secs: s.created_secs,
            created: utc_date(s.created_secs),
            label: s.label.clone(),
            sb_seq: s.sb_seq,
            cp_cno: s.cp_cno,
            cp_record_block: s.cp_record_block,
            cp_record_seq: s.cp_record_seq,
            written_secs: s.written_secs,
            written: utc_date(s.written_secs),
        }
    }
}

/// Both superblock copies (the first block and the last block of the device).
pub fn superblock(dev: &mut dyn BlockDevice) -> Result<Vec<SuperblockCopy>> {
    let size = dev.size_bytes();
    if size < 2 * BLOCK_BYTES as u64 {
        return Err(Error::corrupt(format!(
            "device of {size} bytes is too small to hold an lsfs image"
        )));
    }
    let last = size / BLOCK_BYTES as u64 - 1;
    let mut out = Vec::new();
    for at in [0, last] {
        let mut b = vec![0; BLOCK_BYTES];
        dev.read_at(at * BLOCK_BYTES as u64, &mut b)?;
        match Superblock::decode(&b, &format!("block {at}"), size) {
            Ok(sb) => out.push(SuperblockCopy {
                block: at,
                error: None,
                superblock: Some((&sb).into()),
            }),
            Err(e) => out.push(SuperblockCopy {
                block: at,
                error: Some(e.to_string()),
                superblock: None,
            }),
        }
    }
    Ok(out)
}

/// The valid superblock copy with the highest sequence number.
pub fn newest_superblock(dev: &mut dyn BlockDevice) -> Result<Superblock> {
    let size = dev.size_bytes();
    if size < 2 * BLOCK_BYTES as u64 {
        return Err(Error::corrupt(format!(
            "device of {size} bytes is too small to hold an lsfs image"
        )));
    }
    let last = size / BLOCK_BYTES as u64 - 1;
    let mut best: Option<Superblock> = None;
    let mut errs = Vec::new();
    for at in [0, last] {
        let mut b = vec![0; BLOCK_BYTES];
        dev.read_at(at * BLOCK_BYTES as u64, &mut b)?;
        match Superblock::decode(&b, &format!("block {at}"), size) {
            Ok(sb) if best.as_ref().is_none_or(|x| x.sb_seq < sb.sb_seq) => best = Some(sb),
            Ok(_) => {}
            Err(e) => errs.push(e.to_string()),
        }
    }
    best.ok_or_else(|| Error::corrupt(format!("no valid superblock: {}", errs.join("; "))))
}

/// One segment's usage, as `lssu` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentInfo {
    pub segno: u64,
    pub first_block: u64,
    pub nblocks: u32,
    pub nlive: u32,
    pub nsnapshot: u32,
    pub lastmod_secs: u64,
    pub lastmod: String,
    /// "free", "active" (the log writes here now or next), "error", or "used".
    pub state: String,
}

fn open_store(dev: Box<dyn BlockDevice>) -> Result<Store> {
    let config = StoreConfig {
        read_only: true,
        cache_blocks: 1024,
        ..StoreConfig::default()
    };
    Ok(Store::open(dev, config)?.store)
}

/// Usage of every segment as of the newest checkpoint (plus the blocks of
/// fsync records written after it).
pub fn segments(dev: Box<dyn BlockDevice>) -> Result<Vec<SegmentInfo>> {
    let s = open_store(dev)?;
    Ok((0..s.geo().nsegments)
        .map(|seg| {
            let u: SegUsage = s.segs().usage[seg as usize];
            let state = if u.flags & SU_ERROR != 0 {
                "error"
            } else if s.is_log_head_segment(seg) {
                "active"
            } else if u.nblocks == 0 {
                "free"
            } else if u.flags & SU_PLUGGED != 0 {
                // Its summary is in the SSA; dump-segment shows its records as they were.
                "plugged"
            } else {
                "used"
            };
            SegmentInfo {
                segno: seg,
                first_block: s.geo().segment_start(seg),
                nblocks: u.nblocks,
                nlive: u.nlive,
                nsnapshot: u.nsnapshot,
                lastmod_secs: u.lastmod_secs,
                lastmod: utc_date(u.lastmod_secs),
                state: state.into(),
            }
        })
        .collect())
}

/// One checkpoint, as `lscp` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckpointInfo {
    pub cno: u64,
    pub created_secs: u64,
    pub date: String,
    pub snapshot: bool,
    pub inodes: u64,
    pub blocks: u64,
}

pub fn checkpoints(dev: Box<dyn BlockDevice>) -> Result<Vec<CheckpointInfo>> {
    let s = open_store(dev)?;
    Ok(s.cps()
        .entries
        .values()
        .map(|e| CheckpointInfo {
            cno: e.cno,
            created_secs: e.created_secs,
            date: utc_date(e.created_secs),
            snapshot: e.is_snapshot(),
            inodes: e.inodes_used,
            blocks: e.blocks_used,
        })
        .collect())
}

/// The records of one segment, as `dumpseg` shows them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentDump {
    pub segno: u64,
    pub first_block: u64,
    pub records: Vec<RecordDump>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct RecordDump {
    pub block: u64,
    pub seq: u64,
    pub cno: u64,
    pub flags: u32,
    /// The flags by name: "super_root", "dsync", "cp_begin".
    pub flag_names: Vec<String>,
    pub nblocks: u32,
    pub nsum_blocks: u32,
    pub next_seg: u64,
    pub created_secs: u64,
    pub entries: Vec<EntryDump>,
    /// Bytes of inline items (fsync records: operations and inode images).
    pub inline_bytes: usize,
    /// The items, one line each, or why they do not decode.
    pub items: Vec<String>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct EntryDump {
    /// Physical block of the payload block this entry describes.
    pub block: u64,
    pub ino: u64,
    pub offset: u64,
    pub vblock: u64,
    pub cno: u64,
    pub kind: String,
}

/// Every valid record of segment `segno`, in order. Needs only a valid
/// superblock, so it works on images that no longer open.
pub fn dump_segment(dev: &mut dyn BlockDevice, segno: u64) -> Result<SegmentDump> {
    let sb = newest_superblock(dev)?;
    let geo = sb.geometry();
    if segno >= geo.nsegments {
        return Err(Error::invalid(format!(
            "segment {segno}: the image has segments 0..{}",
            geo.nsegments
        )));
    }
    let recs = segment_records(dev, &geo, sb.fs_id, segno)?;
    let records = recs
        .iter()
        .map(|r| {
            let h = &r.header;
            let mut names = Vec::new();
            for (bit, name) in [
                (FLAG_SUPER_ROOT, "super_root"),
                (FLAG_DSYNC, "dsync"),
                (FLAG_CP_BEGIN, "cp_begin"),
            ] {
                if h.flags & bit != 0 {
                    names.push(name.to_string());
                }
            }
            RecordDump {
                block: r.block,
                seq: h.seq,
                cno: h.cno,
                flags: h.flags,
                flag_names: names,
                nblocks: h.nblocks,
                nsum_blocks: h.nsum_blocks,
                next_seg: h.next_seg,
                created_secs: h.created_secs,
                entries: h
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| EntryDump {
                        block: r.payload_block(i),
                        ino: e.ino,
                        offset: e.offset,
                        vblock: e.vblock,
                        cno: e.cno,
                        kind: format!("{:?}", e.kind),
                    })
                    .collect(),
                inline_bytes: h.inline.len(),
                items: match crate::log::items::decode(&h.inline, "inline items") {
                    Ok(items) => items.iter().map(crate::log::items::describe).collect(),
                    Err(e) => vec![format!("damaged: {e}")],
                },
            }
        })
        .collect();
    Ok(SegmentDump {
        segno,
        first_block: geo.segment_start(segno),
        records,
    })
}

/// `YYYY-MM-DD HH:MM:SS` in UTC (no time-zone database needed).
pub fn utc_date(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(utc_date(0), "1970-01-01 00:00:00");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14 22:13:20");
    }
}
