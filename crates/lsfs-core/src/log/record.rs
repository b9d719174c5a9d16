//! Log records (partial segments). A record is a header block, more summary
//! blocks if needed, and payload blocks, written with one device write. The
//! summary has one entry per payload block, then the record's inline items
//! (`log/items.rs`; fsync records only); a CRC32C covers the header,
//! summary and payload, so a torn or stale record is recognised and never
//! replayed. See docs/FORMAT.md for every byte.

use crate::codec::{crc_with_hole, Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;

pub const RECORD_MAGIC: u32 = 0x3152_534C; // "LSR1"
pub const RECORD_VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 128;
pub const ENTRY_BYTES: usize = 32;
const CRC_AT: usize = 8;
/// Largest payload of one record: keeps the write buffer bounded (4 MiB).
pub const MAX_RECORD_PAYLOAD: usize = 1024;
/// Most inline item bytes one record carries (in its summary blocks).
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Most header and summary blocks of a record: a full payload's entries and
/// a full inline part.
pub const MAX_SUMMARY_BLOCKS: usize =
    (HEADER_BYTES + MAX_RECORD_PAYLOAD * ENTRY_BYTES + MAX_INLINE_BYTES).div_ceil(BLOCK_BYTES);
/// Most blocks of one record.
pub const MAX_RECORD_BLOCKS: usize = MAX_RECORD_PAYLOAD + MAX_SUMMARY_BLOCKS;
/// Where the header's inline byte count is; the header's bytes after it are zero.
#[cfg(test)]
const INLINE_AT: usize = 80;

/// Record flags.
pub const FLAG_SUPER_ROOT: u32 = 1; // the last payload block is a super root: the record ends a checkpoint
pub const FLAG_DSYNC: u32 = 2; // written by fsync: data blocks and inode images to roll forward
pub const FLAG_CP_BEGIN: u32 = 4; // first record of a checkpoint's records
pub const FLAG_DATA_STREAM: u32 = 8; // written to a data stream's segment: never part of the log's chain
pub const FLAG_MOVES: u32 = 16; // a cleaning pass's move record: its victims are free from here on
pub const FLAG_COMPRESSED: u32 = 32; // the payload is one compressed frame (log/frame.rs) in its first slots
/// Where the header's count of frame blocks is (compressed records).
const FRAME_AT: usize = 84;

/// What a payload block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    /// A data block of a file (regular file, directory, or metadata file).
    Data = 0,
    /// A B-tree node of a file's block map, directory or xattr tree.
    Node = 1,
    /// A block of the DAT (physically addressed).
    DatBlock = 2,
    /// A node of the DAT's own block map.
    DatNode = 3,
    /// The super root of a checkpoint.
    SuperRoot = 4,
    /// An inode image written by fsync, to roll forward: images written
    /// before inline items only (read, never written now).
    InodeLog = 5,
    /// A block of the DAT journal (physically addressed, named by the
    /// super root): DAT entries changed since their DAT block was written.
    DatJournal = 6,
}

impl BlockKind {
    fn from_u8(v: u8) -> Option<BlockKind> {
        Some(match v {
            0 => BlockKind::Data,
            1 => BlockKind::Node,
            2 => BlockKind::DatBlock,
            3 => BlockKind::DatNode,
            4 => BlockKind::SuperRoot,
            5 => BlockKind::InodeLog,
            6 => BlockKind::DatJournal,
            _ => return None,
        })
    }
}

/// One summary entry: who owns a payload block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    pub ino: u64,
    /// File block offset for data; B-tree key space marker for nodes; DAT block index for DAT blocks.
    pub offset: u64,
    /// Virtual block number, or 0 for physically addressed blocks.
    pub vblock: u64,
    pub cno: u64,
    pub kind: BlockKind,
}

/// The class (`SummaryEntry::class`) of a user file's contents: what the
/// cleaner's data-only write amplification counts.
pub const FILE_DATA: &str = "file data";

/// Whether a block of `kind` owned by inode `ino` holds a user file's
/// contents, as opposed to metadata.
pub fn holds_file_data(kind: BlockKind, ino: u64) -> bool {
    kind == BlockKind::Data && ino >= crate::layout::FIRST_USER_INO
}

impl SummaryEntry {
    /// The 32 bytes of FORMAT.md §3 (also the SSA's entries, §6).
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.ino)
            .u64(self.offset)
            .u64(self.vblock)
            .u64((self.cno & 0x00ff_ffff_ffff_ffff) | ((self.kind as u64) << 56));
    }

    /// Decode entry `i` of `what`.
    pub fn decode(r: &mut Reader, what: &str, i: usize) -> Result<SummaryEntry> {
        let ino = r.u64()?;
        let offset = r.u64()?;
        let vblock = r.u64()?;
        let ck = r.u64()?;
        let kind = BlockKind::from_u8((ck >> 56) as u8).ok_or_else(|| {
            Error::corrupt(format!(
                "{what}: summary entry {i} has unknown kind {}",
                ck >> 56
            ))
        })?;
        Ok(SummaryEntry {
            ino,
            offset,
            vblock,
            cno: ck & 0x00ff_ffff_ffff_ffff,
            kind,
        })
    }

    /// What the block holds, for the write counters of `lsfs stats`: user
    /// file data and tree nodes, each metadata file, the DAT, super roots
    /// and fsync'd inodes.
    pub fn class(&self) -> &'static str {
        use crate::layout::{CPFILE_INO, DAT_INO, FIRST_USER_INO, IFILE_INO, SSA_INO, SUFILE_INO};
        match (self.kind, self.ino) {
            (BlockKind::DatBlock, _) => "dat",
            (BlockKind::DatNode, _) => "dat node",
            (BlockKind::DatJournal, _) => "dat journal",
            (BlockKind::SuperRoot, _) => "super root",
            (BlockKind::InodeLog, _) => "inode log",
            (k, i) if holds_file_data(k, i) => FILE_DATA,
            (BlockKind::Node, i) if i >= FIRST_USER_INO => "file node",
            (_, IFILE_INO) => "ifile",
            (_, CPFILE_INO) => "cpfile",
            (_, SUFILE_INO) => "sufile",
            (_, SSA_INO) => "ssa",
            (_, DAT_INO) => "dat",
            _ => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub flags: u32,
    pub fs_id: u64,
    pub seq: u64,
    pub cno: u64,
    pub segno: u64,
    /// Total blocks: header and summary blocks plus payload.
    pub nblocks: u32,
    /// Header and summary blocks.
    pub nsum_blocks: u32,
    pub next_seg: u64,
    pub created_secs: u64,
    /// Data-stream records written since the log's previous record: they
    /// took the sequence numbers between the two (0 in data-stream records).
    pub seq_gap: u32,
    pub entries: Vec<SummaryEntry>,
    /// Inline items (`log/items.rs`), stored after the summary entries.
    pub inline: Vec<u8>,
    /// Blocks of the compressed frame that holds the payload's first
    /// `frame_slots` blocks (flag FLAG_COMPRESSED), 0 for a raw payload.
    /// The record still spans all its payload slots; slots
    /// `frame_blocks..frame_slots` are not written.
    pub frame_blocks: u32,
    pub frame_slots: u32,
}

/// Blocks of header and summary for `n` payload blocks.
pub fn summary_blocks(n: usize) -> usize {
    summary_blocks_with(n, 0)
}

/// Blocks of header and summary for `n` payload blocks and `inline` bytes of items.
pub fn summary_blocks_with(n: usize, inline: usize) -> usize {
    (HEADER_BYTES + n * ENTRY_BYTES + inline).div_ceil(BLOCK_BYTES)
}

impl RecordHeader {
    /// Encode header + summary + payload into one buffer with its CRC.
    pub fn encode(&self, payload: &[&[u8]]) -> Vec<u8> {
        assert_eq!(payload.len(), self.entries.len());
        let mut b = Vec::with_capacity(self.nblocks as usize * BLOCK_BYTES);
        b.resize(self.nsum_blocks as usize * BLOCK_BYTES, 0);
        for p in payload {
            assert_eq!(p.len(), BLOCK_BYTES);
            b.extend_from_slice(p);
        }
        self.seal(&mut b);
        b
    }

    /// Blocks the record's one write covers, and its CRC: all of them, or
    /// the summary and the frame of a compressed record.
    pub fn written_blocks(&self) -> u32 {
        self.nblocks - self.unwritten_slots()
    }

    /// Payload slots the record spans without writing them.
    pub fn unwritten_slots(&self) -> u32 {
        self.frame_slots - self.frame_blocks
    }

    /// The record's blocks on the device, `slots` (its whole span, stale
    /// blocks in the unwritten slots), as one write lays them out: the
    /// summary and the frame, then the payload after the frame's slots.
    pub fn written_parts<'a>(&self, slots: &'a [u8]) -> [&'a [u8]; 2] {
        let head = (self.nsum_blocks + self.frame_blocks) as usize * BLOCK_BYTES;
        let tail = (self.nsum_blocks + self.frame_slots) as usize * BLOCK_BYTES;
        [&slots[..head], &slots[tail..]]
    }

    /// The CRC of the record whose span (as read) is `slots`.
    fn written_crc(&self, slots: &[u8]) -> u32 {
        let [head, tail] = self.written_parts(slots);
        crc32c::crc32c_append(crc_with_hole(head, CRC_AT), tail)
    }

    /// Compute the CRC of `record` (its whole span, as read from the
    /// device) again after a change to bytes it covers: for tests and
    /// tools that damage a record on purpose, so that only the damage is
    /// wrong.
    pub fn reseal(record: &mut [u8]) -> Result<()> {
        let h = Self::decode_summary(record)?;
        let crc = h.written_crc(&record[..h.nblocks as usize * BLOCK_BYTES]);
        record[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Fill in the header and summary of `record`, a whole record whose
    /// first `nsum_blocks` are zeros and whose payload blocks are in place
    /// after them, and its CRC. Writers put each payload block straight
    /// into the record this way, instead of into a buffer of its own first
    /// (a copy and an allocation per block written).
    pub fn seal(&self, record: &mut [u8]) {
        assert!(self.inline.len() <= MAX_INLINE_BYTES);
        assert!(
            !self.entries.is_empty() || !self.inline.is_empty(),
            "a record holds payload or items"
        );
        let nsum = summary_blocks_with(self.entries.len(), self.inline.len());
        assert_eq!(nsum as u32, self.nsum_blocks);
        assert_eq!((nsum + self.entries.len()) as u32, self.nblocks);
        assert_eq!(record.len(), self.written_blocks() as usize * BLOCK_BYTES);
        assert_eq!(self.frame_blocks > 0, self.flags & FLAG_COMPRESSED != 0);
        assert!(self.frame_blocks <= self.frame_slots);
        let used = HEADER_BYTES + self.entries.len() * ENTRY_BYTES + self.inline.len();
        let mut w = Writer::with_capacity(used);
        w.u32(RECORD_MAGIC)
            .u16(RECORD_VERSION)
            .u16(HEADER_BYTES as u16)
            .u32(0)
            .u32(self.flags)
            .u64(self.fs_id)
            .u64(self.seq)
            .u64(self.cno)
            .u64(self.segno)
            .u32(self.nblocks)
            .u32(self.nsum_blocks)
            .u32(self.entries.len() as u32)
            .u32(self.seq_gap)
            .u64(self.next_seg)
            .u64(self.created_secs)
            .u32(self.inline.len() as u32)
            .u32(self.frame_blocks)
            .u32(self.frame_slots)
            .pad_to(HEADER_BYTES);
        for e in &self.entries {
            e.encode(&mut w);
        }
        w.bytes(&self.inline);
        let summary = w.finish();
        assert_eq!(summary.len(), used);
        debug_assert!(
            record[used..nsum * BLOCK_BYTES].iter().all(|&x| x == 0),
            "the summary's padding is zeros"
        );
        record[..used].copy_from_slice(&summary);
        // The same bytes `written_parts` gives back on reading.
        let crc = crc_with_hole(record, CRC_AT);
        record[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// `block` read from its start if it begins with a record header of
    /// this format (magic, version and header size), of any file system;
    /// the reader stands after those.
    fn header_reader(block: &[u8]) -> Option<Reader<'_>> {
        let mut r = Reader::new(block, "record header");
        (r.u32().ok()? == RECORD_MAGIC
            && r.u16().ok()? == RECORD_VERSION
            && r.u16().ok()? as usize == HEADER_BYTES)
            .then_some(r)
    }

    /// The file system that wrote the record header in `block`, if it is
    /// one (of any file system: the magic and version match).
    pub fn peek_fs_id(block: &[u8]) -> Option<u64> {
        let mut r = Self::header_reader(block)?;
        r.skip(8).ok()?;
        r.u64().ok()
    }

    /// Decode the fixed header from the first block of a record; `None` if
    /// the block is not a record header of this file system (stale, foreign
    /// or never written): the normal end of the log.
    pub fn peek(block: &[u8], fs_id: u64) -> Option<(u32, u64, u32, u32)> {
        let mut r = Self::header_reader(block)?;
        r.skip(4).ok()?;
        let flags = r.u32().ok()?;
        if r.u64().ok()? != fs_id {
            return None;
        }
        let seq = r.u64().ok()?;
        r.skip(16).ok()?;
        let nblocks = r.u32().ok()?;
        let nsum = r.u32().ok()?;
        Some((flags, seq, nblocks, nsum))
    }

    /// Decode the header and summary from a record's first `nsum` blocks,
    /// without the payload (so without checking the CRC).
    pub fn decode_summary(buf: &[u8]) -> Result<RecordHeader> {
        Self::decode_inner(buf, "record summary", false)
    }

    /// Decode a whole record (header, summary and payload) and verify its CRC.
    /// `where_` names the record for messages.
    pub fn decode(buf: &[u8], where_: &str) -> Result<RecordHeader> {
        Self::decode_inner(buf, where_, true)
    }

    /// The fixed header, the bytes it says the record spans (and their CRC
    /// when the payload is there), then the summary entries and inline bytes.
    fn decode_inner(buf: &[u8], where_: &str, with_payload: bool) -> Result<RecordHeader> {
        let what = format!("log record at {where_}");
        let (mut h, counts) = Self::decode_fixed(buf, &what)?;
        let need = if with_payload {
            h.nblocks as usize
        } else {
            h.nsum_blocks as usize
        } * BLOCK_BYTES;
        if buf.len() < need {
            return Err(Error::corrupt(format!(
                "{what}: {} bytes, needs {need}",
                buf.len()
            )));
        }
        let body = &buf[..need];
        if with_payload {
            let crc = h.written_crc(body);
            if crc != counts.stored_crc {
                return Err(Error::corrupt(format!(
                    "{what}: checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                    counts.stored_crc
                )));
            }
        }
        let mut r = Reader::at(body, HEADER_BYTES, &what);
        h.entries = Vec::with_capacity(counts.nentries);
        for i in 0..counts.nentries {
            h.entries.push(SummaryEntry::decode(&mut r, &what, i)?);
        }
        h.inline = r.bytes(counts.ninline)?.to_vec();
        Ok(h)
    }

    /// The header block's fixed fields, checked for magic, version, zero
    /// padding, counter limits and consistent sizes. The entries and inline
    /// bytes are left empty; `HeaderCounts` says how many follow.
    fn decode_fixed(buf: &[u8], what: &str) -> Result<(RecordHeader, HeaderCounts)> {
        let mut r = Reader::new(buf, what);
        if r.u32()? != RECORD_MAGIC {
            return Err(Error::corrupt(format!("{what}: bad magic")));
        }
        let version = r.u16()?;
        if version != RECORD_VERSION {
            return Err(Error::unsupported(format!(
                "{what}: record version {version}"
            )));
        }
        r.skip(2)?;
        let stored_crc = r.u32()?;
        let flags = r.u32()?;
        let fs_id = r.u64()?;
        let seq = r.u64()?;
        let cno = r.u64()?;
        let segno = r.u64()?;
        let nblocks = r.u32()?;
        let nsum_blocks = r.u32()?;
        let nentries = r.u32()? as usize;
        let seq_gap = r.u32()?;
        let next_seg = r.u64()?;
        let created_secs = r.u64()?;
        let ninline = r.u32()? as usize;
        let frame_blocks = r.u32()?;
        let frame_slots = r.u32()?;
        if r.bytes(HEADER_BYTES - FRAME_AT - 8)?
            .iter()
            .any(|&b| b != 0)
        {
            return Err(Error::corrupt(format!(
                "{what}: header bytes {}..{HEADER_BYTES} are not zero",
                FRAME_AT + 8
            )));
        }
        check_frame(what, flags, (frame_blocks, frame_slots), nentries)?;
        if seq >= crate::layout::COUNTER_LIMIT || cno >= crate::layout::COUNTER_LIMIT {
            return Err(Error::corrupt(format!(
                "{what}: sequence number {seq:#x} or checkpoint {cno:#x} past the limit {:#x}",
                crate::layout::COUNTER_LIMIT
            )));
        }
        check_sizes(what, nblocks, nsum_blocks, nentries, ninline)?;
        let h = RecordHeader {
            flags,
            fs_id,
            seq,
            cno,
            segno,
            nblocks,
            nsum_blocks,
            next_seg,
            created_secs,
            seq_gap,
            entries: Vec::new(),
            inline: Vec::new(),
            frame_blocks,
            frame_slots,
        };
        let counts = HeaderCounts {
            stored_crc,
            nentries,
            ninline,
        };
        Ok((h, counts))
    }
}

/// A record's sizes agree: payload and inline bytes within bounds and not
/// both empty, summary blocks just enough for them, blocks adding up.
fn check_sizes(
    what: &str,
    nblocks: u32,
    nsum_blocks: u32,
    nentries: usize,
    ninline: usize,
) -> Result<()> {
    if nentries > MAX_RECORD_PAYLOAD
        || ninline > MAX_INLINE_BYTES
        || (nentries == 0 && ninline == 0)
        || summary_blocks_with(nentries, ninline) as u32 != nsum_blocks
        || nsum_blocks as usize + nentries != nblocks as usize
    {
        return Err(Error::corrupt(format!(
            "{what}: inconsistent sizes ({nblocks} blocks, {nsum_blocks} summary blocks, {nentries} entries, {ninline} inline bytes)"
        )));
    }
    Ok(())
}

/// A compressed record's frame takes at least one block and fewer than the
/// payload slots it holds, which are at most the payload's; a raw record
/// has no frame.
fn check_frame(what: &str, flags: u32, (blocks, slots): (u32, u32), nentries: usize) -> Result<()> {
    let compressed = flags & FLAG_COMPRESSED != 0;
    let ok = if compressed {
        blocks > 0 && blocks < slots && slots as usize <= nentries
    } else {
        blocks == 0 && slots == 0
    };
    if !ok {
        return Err(Error::corrupt(format!(
            "{what}: compressed flag {compressed} with a frame of {blocks} blocks for {slots} of {nentries} slots"
        )));
    }
    Ok(())
}

/// What a record's fixed header says about the rest of it.
struct HeaderCounts {
    stored_crc: u32,
    nentries: usize,
    ninline: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> (RecordHeader, Vec<Vec<u8>>) {
        let entries: Vec<_> = (0..n)
            .map(|i| SummaryEntry {
                ino: 20 + i as u64,
                offset: i as u64,
                vblock: 100 + i as u64,
                cno: 7,
                kind: BlockKind::Data,
            })
            .collect();
        let payload: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; BLOCK_BYTES]).collect();
        let nsum = summary_blocks(n) as u32;
        let h = RecordHeader {
            flags: FLAG_DSYNC,
            fs_id: 42,
            seq: 9,
            cno: 7,
            segno: 3,
            nblocks: nsum + n as u32,
            nsum_blocks: nsum,
            next_seg: 4,
            created_secs: 1,
            seq_gap: 0,
            entries,
            inline: Vec::new(),
            frame_blocks: 0,
            frame_slots: 0,
        };
        (h, payload)
    }

    #[test]
    fn round_trip_with_multi_block_summary() {
        let (h, payload) = sample(300);
        assert_eq!(h.nsum_blocks, 3);
        let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
        let buf = h.encode(&refs);
        assert_eq!(RecordHeader::decode(&buf, "test").unwrap(), h);
        assert_eq!(
            RecordHeader::peek(&buf, 42),
            Some((FLAG_DSYNC, 9, h.nblocks, 3))
        );
        assert_eq!(
            RecordHeader::peek(&buf, 43),
            None,
            "a foreign fs_id is not our record"
        );
    }

    /// Items after the entries take more summary blocks; a record of items
    /// alone has no payload; the CRC covers them.
    #[test]
    fn inline_items_round_trip_and_are_covered_by_the_crc() {
        for (n, ninline, nsum) in [
            (1usize, 600usize, 1u32),
            (0, 100, 1),
            (127, 100, 2),
            (300, 9000, 5),
        ] {
            let (mut h, payload) = sample(n);
            h.inline = (0..ninline).map(|i| i as u8 | 1).collect();
            h.nsum_blocks = nsum;
            h.nblocks = nsum + n as u32;
            let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
            let buf = h.encode(&refs);
            assert_eq!(buf.len(), h.nblocks as usize * BLOCK_BYTES);
            assert_eq!(RecordHeader::decode(&buf, "test").unwrap(), h);
            assert_eq!(RecordHeader::decode_summary(&buf).unwrap(), h);
            let at = HEADER_BYTES + n * ENTRY_BYTES + ninline / 2;
            let mut bad = buf.clone();
            bad[at] ^= 4;
            assert!(
                RecordHeader::decode(&bad, "test").is_err(),
                "flip in the items"
            );
            // A count past the summary blocks it has is refused, CRC or not.
            let mut bad = buf.clone();
            bad[INLINE_AT..INLINE_AT + 4].copy_from_slice(&(nsum * 4096).to_le_bytes());
            let e = RecordHeader::decode_summary(&bad).unwrap_err().to_string();
            assert!(e.contains("inconsistent sizes"), "{e}");
        }
        // Reserved header bytes must stay zero.
        let (h, payload) = sample(1);
        let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
        let mut bad = h.encode(&refs);
        bad[100] = 1;
        let e = RecordHeader::decode_summary(&bad).unwrap_err().to_string();
        assert!(e.contains("not zero"), "{e}");
        assert_eq!(MAX_SUMMARY_BLOCKS, 25);
    }

    /// Sequence and checkpoint numbers are added to as records are
    /// written: one at or past the limit is damage, even under a valid CRC.
    #[test]
    fn counters_past_the_limit_are_corrupt() {
        let (h, payload) = sample(5);
        let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
        for (seq, cno) in [(crate::layout::COUNTER_LIMIT, 1), (9, u64::MAX)] {
            let bad = RecordHeader {
                seq,
                cno,
                ..h.clone()
            };
            let e = RecordHeader::decode(&bad.encode(&refs), "test")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("past the limit"),
                "seq {seq:#x} cno {cno:#x}: {e}"
            );
        }
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let (h, payload) = sample(5);
        let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
        let buf = h.encode(&refs);
        for byte in [0usize, 9, 40, 200, BLOCK_BYTES + 17, buf.len() - 1] {
            let mut bad = buf.clone();
            bad[byte] ^= 0x10;
            assert!(
                RecordHeader::decode(&bad, "test").is_err(),
                "flip at byte {byte} went unnoticed"
            );
        }
        assert!(
            RecordHeader::decode(&buf[..BLOCK_BYTES * 2], "test").is_err(),
            "truncated record accepted"
        );
    }
}
