//! The superblock: one copy in the first block of the device, one in the
//! last. They are written alternately, each with a sequence number and a
//! CRC, so a torn write of one leaves the other. It points at the newest
//! checkpoint known durable when it was written; recovery rolls forward from
//! there.

use crate::codec::{crc_with_hole, Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::{Geometry, BLOCK_BYTES};

pub const SB_MAGIC: &[u8; 8] = b"LSFS\0SB1";
/// Format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Incompatible feature: fsync records carry inline items (namespace
/// operations and inode images in their summary blocks, docs/FORMAT.md
/// §3.1). Builds that do not know it would end the log at the first such
/// record and silently drop what it made durable, so they must refuse the
/// image. Set at mkfs, and by a read-write mount of an older image before
/// it writes anything.
pub const FEATURE_INCOMPAT_INLINE_ITEMS: u32 = 1;
/// Incompatible feature: cleaning passes write move records
/// (`FLAG_MOVES`, docs/FORMAT.md §3.2) and reuse their victims before the
/// next checkpoint. A build that does not know them would recover the DAT
/// of the last checkpoint, which may point into a victim written over
/// since, so it must refuse the image. Set at mkfs, and by a read-write
/// mount of an older image before it writes anything.
pub const FEATURE_INCOMPAT_MOVE_RECORDS: u32 = 2;
/// Incompatible feature: DAT entries may count extra users of a block in
/// the high 16 bits of their first word (clones share blocks, docs/FORMAT.md
/// §6). A build that does not know it would read those bits as part of the
/// physical block, and end a shared block when its first user lets go, so
/// it must refuse the image. Set by the first clone, before it changes
/// anything (a checkpoint and both superblocks carry it first).
pub const FEATURE_INCOMPAT_CLONES: u32 = 4;
/// Incompatible feature: records may be compressed (`FLAG_COMPRESSED`,
/// docs/FORMAT.md §3.3) and DAT entries name slots of their frames. A
/// build that does not know them would read a frame as the block itself,
/// so it must refuse the image. Set by a read-write mount that compresses,
/// before it writes anything.
pub const FEATURE_INCOMPAT_COMPRESSED_RECORDS: u32 = 8;
/// Incompatible feature: frames may be zstd's (codec byte 2, docs/FORMAT.md
/// §3.3), not only LZ4's. A build that knows only LZ4 frames would call
/// such a frame corrupt at its first read, so it must refuse the image.
/// Set, with COMPRESSED_RECORDS, by a read-write mount that compresses
/// with zstd, before it writes anything.
pub const FEATURE_INCOMPAT_ZSTD_FRAMES: u32 = 16;
/// Incompatible feature bits this build understands.
pub const FEATURES_INCOMPAT_KNOWN: u32 = FEATURE_INCOMPAT_INLINE_ITEMS
    | FEATURE_INCOMPAT_MOVE_RECORDS
    | FEATURE_INCOMPAT_CLONES
    | FEATURE_INCOMPAT_COMPRESSED_RECORDS
    | FEATURE_INCOMPAT_ZSTD_FRAMES;
/// Read-only-compatible feature bits this build understands (none yet).
pub const FEATURES_RO_COMPAT_KNOWN: u32 = 0;
const CRC_AT: usize = BLOCK_BYTES - 4;
pub const LABEL_BYTES: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub features_compat: u32,
    pub features_incompat: u32,
    pub features_ro_compat: u32,
    pub block_bytes: u32,
    pub segment_blocks: u32,
    pub nsegments: u64,
    pub first_segment_block: u64,
    pub device_blocks: u64,
    /// Random at mkfs; every record carries it, so records of an earlier
    /// file system on the same device are never mistaken for ours.
    pub fs_id: u64,
    pub created_secs: u64,
    pub label: String,
    /// Incremented at every superblock write; the higher valid copy wins.
    pub sb_seq: u64,
    /// The checkpoint recovery starts from.
    pub cp_cno: u64,
    /// First block of the log record whose last block is that checkpoint's super root.
    pub cp_record_block: u64,
    /// That record's sequence number.
    pub cp_record_seq: u64,
    pub written_secs: u64,
}

impl Superblock {
    /// The superblock mkfs writes for `geo`: no checkpoint yet (the first
    /// superblock write names one).
    pub fn new(geo: &Geometry, label: String, fs_id: u64, now: u64) -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            features_compat: 0,
            features_incompat: FEATURE_INCOMPAT_INLINE_ITEMS | FEATURE_INCOMPAT_MOVE_RECORDS,
            features_ro_compat: 0,
            block_bytes: BLOCK_BYTES as u32,
            segment_blocks: geo.segment_blocks,
            nsegments: geo.nsegments,
            first_segment_block: geo.first_segment_block,
            device_blocks: geo.device_blocks,
            fs_id,
            created_secs: now,
            label,
            sb_seq: 0,
            cp_cno: 0,
            cp_record_block: 0,
            cp_record_seq: 0,
            written_secs: now,
        }
    }

    /// Whether fsync records may carry inline items.
    pub fn inline_items(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_INLINE_ITEMS != 0
    }

    /// Whether cleaning passes may write move records and reuse their
    /// victims before the next checkpoint.
    pub fn move_records(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_MOVE_RECORDS != 0
    }

    /// Whether DAT entries may count extra users (clones).
    pub fn clones(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_CLONES != 0
    }

    /// Whether records may be compressed.
    pub fn compressed_records(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_COMPRESSED_RECORDS != 0
    }

    /// Whether frames may be zstd's.
    pub fn zstd_frames(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_ZSTD_FRAMES != 0
    }

    pub fn geometry(&self) -> Geometry {
        Geometry {
            block_bytes: self.block_bytes as usize,
            segment_blocks: self.segment_blocks,
            nsegments: self.nsegments,
            first_segment_block: self.first_segment_block,
            device_blocks: self.device_blocks,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(BLOCK_BYTES);
        let mut label = self.label.as_bytes().to_vec();
        label.resize(LABEL_BYTES, 0);
        w.bytes(SB_MAGIC)
            .u32(self.version)
            .u32(self.features_compat)
            .u32(self.features_incompat)
            .u32(self.features_ro_compat)
            .u32(self.block_bytes)
            .u32(self.segment_blocks)
            .u64(self.nsegments)
            .u64(self.first_segment_block)
            .u64(self.device_blocks)
            .u64(self.fs_id)
            .u64(self.created_secs)
            .bytes(&label)
            .u64(self.sb_seq)
            .u64(self.cp_cno)
            .u64(self.cp_record_block)
            .u64(self.cp_record_seq)
            .u64(self.written_secs)
            .pad_to(BLOCK_BYTES);
        let mut b = w.finish();
        let crc = crc_with_hole(&b, CRC_AT);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode the superblock copy read from `where_`, checking magic, CRC,
    /// version, features and geometry against the device size.
    pub fn decode(b: &[u8], where_: &str, device_bytes: u64) -> Result<Superblock> {
        Self::decode_knowing(b, where_, device_bytes, FEATURES_INCOMPAT_KNOWN)
    }

    /// [`Superblock::decode`] by a build that knows the incompatible
    /// features `known` (the tests' stand-in for an older build).
    fn decode_knowing(b: &[u8], where_: &str, device_bytes: u64, known: u32) -> Result<Superblock> {
        let what = format!("superblock at {where_}");
        let mut r = Reader::new(b, &what);
        let magic = r.bytes(8)?;
        if magic != SB_MAGIC {
            return Err(Error::unsupported(format!(
                "{what}: no lsfs magic (found {:02x?}); this is not an lsfs image",
                magic
            )));
        }
        if b.len() < BLOCK_BYTES {
            return Err(Error::corrupt(format!(
                "{what}: truncated to {} bytes",
                b.len()
            )));
        }
        let stored = u32::from_le_bytes(b[CRC_AT..CRC_AT + 4].try_into().unwrap());
        let crc = crc_with_hole(&b[..BLOCK_BYTES], CRC_AT);
        if stored != crc {
            return Err(Error::corrupt(format!(
                "{what}: checksum mismatch (stored {stored:#010x}, computed {crc:#010x})"
            )));
        }
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(Error::unsupported(format!(
                "{what}: format version {version}; this build reads version {FORMAT_VERSION} only"
            )));
        }
        let features_compat = r.u32()?;
        let features_incompat = r.u32()?;
        let features_ro_compat = r.u32()?;
        if features_incompat & !known != 0 {
            return Err(Error::unsupported(format!(
                "{what}: unknown incompatible feature flags {:#x} (made by a newer lsfs; this build cannot read the image)",
                features_incompat & !known
            )));
        }
        let sb = Superblock {
            version,
            features_compat,
            features_incompat,
            features_ro_compat,
            block_bytes: r.u32()?,
            segment_blocks: r.u32()?,
            nsegments: r.u64()?,
            first_segment_block: r.u64()?,
            device_blocks: r.u64()?,
            fs_id: r.u64()?,
            created_secs: r.u64()?,
            label: {
                let l = r.bytes(LABEL_BYTES)?;
                let end = l.iter().position(|&c| c == 0).unwrap_or(LABEL_BYTES);
                String::from_utf8_lossy(&l[..end]).into_owned()
            },
            sb_seq: r.u64()?,
            cp_cno: r.u64()?,
            cp_record_block: r.u64()?,
            cp_record_seq: r.u64()?,
            written_secs: r.u64()?,
        };
        sb.validate(&what, device_bytes)?;
        Ok(sb)
    }

    fn validate(&self, what: &str, device_bytes: u64) -> Result<()> {
        if self.block_bytes as usize != BLOCK_BYTES {
            return Err(Error::unsupported(format!(
                "{what}: block size {} (only {BLOCK_BYTES} is supported)",
                self.block_bytes
            )));
        }
        let device_blocks = device_bytes / BLOCK_BYTES as u64;
        if self.device_blocks > device_blocks {
            return Err(Error::corrupt(format!(
                "{what}: image was made for {} blocks but the device has only {} (truncated image?)",
                self.device_blocks, device_blocks
            )));
        }
        let g = Geometry::for_device(self.device_blocks * BLOCK_BYTES as u64, self.segment_blocks)
            .map_err(|e| Error::corrupt(format!("{what}: bad geometry: {e}")))?;
        if g.nsegments != self.nsegments || self.first_segment_block != 1 {
            return Err(Error::corrupt(format!(
                "{what}: {} segments from block {} do not fit {} blocks",
                self.nsegments, self.first_segment_block, self.device_blocks
            )));
        }
        for (name, v) in [
            ("sequence number", self.sb_seq),
            ("checkpoint number", self.cp_cno),
            ("checkpoint record's sequence number", self.cp_record_seq),
        ] {
            if v >= crate::layout::COUNTER_LIMIT {
                return Err(Error::corrupt(format!(
                    "{what}: {name} {v:#x} is past the limit {:#x}",
                    crate::layout::COUNTER_LIMIT
                )));
            }
        }
        let seg_end = g.first_segment_block + g.total_segment_blocks();
        if self.cp_record_block < g.first_segment_block || self.cp_record_block >= seg_end {
            return Err(Error::corrupt(format!(
                "{what}: checkpoint record block {} is outside the log",
                self.cp_record_block
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::COUNTER_LIMIT;

    fn sb(geo: Geometry) -> Superblock {
        Superblock {
            sb_seq: 5,
            cp_cno: 3,
            cp_record_block: geo.first_segment_block,
            cp_record_seq: 4,
            ..Superblock::new(&geo, "t".into(), 7, 1)
        }
    }

    /// Found by the `image` fuzz target: a resealed superblock whose
    /// sequence number was `u64::MAX` overflowed at the next superblock
    /// write. Counters the engine adds to are refused past the limit.
    #[test]
    fn counters_past_the_limit_are_corrupt() {
        let bytes = 64u64 << 20;
        let geo = Geometry::for_device(bytes, 256).unwrap();
        let good = sb(geo);
        assert_eq!(
            Superblock::decode(&good.encode(), "t", bytes).unwrap(),
            good
        );
        for f in [
            |s: &mut Superblock| s.sb_seq = u64::MAX,
            |s: &mut Superblock| s.cp_cno = COUNTER_LIMIT,
            |s: &mut Superblock| s.cp_record_seq = COUNTER_LIMIT + 5,
        ] {
            let mut s = good.clone();
            f(&mut s);
            let e = Superblock::decode(&s.encode(), "superblock 0", bytes)
                .unwrap_err()
                .to_string();
            assert!(e.contains("past the limit"), "{e}");
        }
    }

    /// mkfs sets the inline-items feature; an image without it still
    /// opens; an unknown incompatible bit is refused, naming the bit.
    #[test]
    fn inline_items_feature_is_known_and_others_refused() {
        let bytes = 64u64 << 20;
        let geo = Geometry::for_device(bytes, 256).unwrap();
        let s = sb(geo);
        assert!(s.inline_items() && s.move_records());
        let old = Superblock {
            features_incompat: 0,
            ..s.clone()
        };
        assert!(!Superblock::decode(&old.encode(), "t", bytes)
            .unwrap()
            .inline_items());
        let future = Superblock {
            features_incompat: FEATURE_INCOMPAT_INLINE_ITEMS | 32,
            ..s.clone()
        };
        let e = Superblock::decode(&future.encode(), "block 0", bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown incompatible feature flags 0x20"), "{e}");
        // mkfs leaves CLONES to the first clone; an image with it opens.
        assert!(!s.clones());
        let cloned = Superblock {
            features_incompat: s.features_incompat | FEATURE_INCOMPAT_CLONES,
            ..s
        };
        assert!(Superblock::decode(&cloned.encode(), "t", bytes)
            .unwrap()
            .clones());
    }

    /// An image with zstd frames opens here, and a build that knows
    /// compressed records but only LZ4 frames (the features before
    /// ZSTD_FRAMES) refuses it, naming the bit; an LZ4 image it opens.
    #[test]
    fn zstd_frames_are_refused_by_a_build_without_the_bit() {
        let bytes = 64u64 << 20;
        let geo = Geometry::for_device(bytes, 256).unwrap();
        let s = sb(geo);
        assert!(!s.compressed_records() && !s.zstd_frames());
        let lz4 = Superblock {
            features_incompat: s.features_incompat | FEATURE_INCOMPAT_COMPRESSED_RECORDS,
            ..s.clone()
        };
        let zstd = Superblock {
            features_incompat: lz4.features_incompat | FEATURE_INCOMPAT_ZSTD_FRAMES,
            ..s
        };
        let got = Superblock::decode(&zstd.encode(), "t", bytes).unwrap();
        assert!(got.compressed_records() && got.zstd_frames());
        let older = FEATURES_INCOMPAT_KNOWN & !FEATURE_INCOMPAT_ZSTD_FRAMES;
        assert!(Superblock::decode_knowing(&lz4.encode(), "t", bytes, older).is_ok());
        let e = Superblock::decode_knowing(&zstd.encode(), "block 0", bytes, older)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("superblock at block 0")
                && e.contains("unknown incompatible feature flags 0x10")
                && e.contains("newer lsfs"),
            "{e}"
        );
    }
}
