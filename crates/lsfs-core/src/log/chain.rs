//! Reading the log back: the records of one segment, and the chain of
//! records that recovery follows from a checkpoint.

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::layout::Geometry;
use crate::log::items::{self, Item};
use crate::log::record::{RecordHeader, FLAG_DATA_STREAM, MAX_RECORD_BLOCKS};

/// A record found on the device.
#[derive(Clone, Debug)]
pub struct FoundRecord {
    /// Physical block where the record starts.
    pub block: u64,
    pub header: RecordHeader,
}

impl FoundRecord {
    /// Physical block of payload entry `i`.
    pub fn payload_block(&self, i: usize) -> u64 {
        self.block + self.header.nsum_blocks as u64 + i as u64
    }
    pub fn end_block(&self) -> u64 {
        self.block + self.header.nblocks as u64
    }
}

/// Check a record of the recovery chain against the SUFILE entry of its
/// segment, which counts `written` blocks there. A record the checkpoint
/// being opened wrote, or one before it, lies within that count (the
/// checkpoint counts its own records). A record after it (`after`: rolled
/// forward, not counted) starts exactly where the count ends, since the log
/// appends. Otherwise the SUFILE or the record is damaged, and a writer
/// trusting either would overwrite the other or misjudge the free space.
pub fn check_counted(geo: &Geometry, r: &FoundRecord, written: u32, after: bool) -> Result<()> {
    let start = geo.segment_start(r.header.segno);
    let (off, end) = (r.block - start, r.end_block() - start);
    let bad = if after {
        off != written as u64
    } else {
        end > written as u64
    };
    if bad {
        return Err(Error::corrupt(format!(
            "record at block {} (sequence {}, {} blocks{}) takes blocks {off}..{end} of segment {}, but its SUFILE entry counts {written} blocks written there",
            r.block,
            r.header.seq,
            r.header.nblocks,
            if after { ", after the checkpoint" } else { "" },
            r.header.segno
        )));
    }
    Ok(())
}

/// Read and verify the record starting at `block` whose sequence number must
/// be `seq` (any, if `None`) and which must end inside its segment.
/// `Ok(None)` means no valid record is there: the end of the log.
pub fn read_record(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    block: u64,
    seq: Option<u64>,
) -> Result<Option<FoundRecord>> {
    Ok(read_record_span(dev, geo, fs_id, block, seq)?.map(|(r, _)| r))
}

/// [`read_record`], with the record's blocks as read (its whole span).
pub fn read_record_span(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    block: u64,
    seq: Option<u64>,
) -> Result<Option<(FoundRecord, Vec<u8>)>> {
    let Some(seg) = geo.segment_of(block) else {
        return Ok(None);
    };
    let seg_end = geo.segment_start(seg) + geo.segment_blocks as u64;
    if block >= seg_end {
        return Ok(None);
    }
    let mut first = vec![0; geo.block_bytes];
    dev.read_at(geo.byte_offset(block), &mut first)?;
    let Some((_, found_seq, nblocks, nsum)) = RecordHeader::peek(&first, fs_id) else {
        return Ok(None);
    };
    // A record of inline items alone has no payload: nsum = nblocks.
    if seq.is_some_and(|s| s != found_seq)
        || nsum == 0
        || nsum > nblocks
        || nblocks as usize > MAX_RECORD_BLOCKS
        || block + nblocks as u64 > seg_end
    {
        return Ok(None);
    }
    let mut buf = vec![0; nblocks as usize * geo.block_bytes];
    dev.read_at(geo.byte_offset(block), &mut buf)?;
    match RecordHeader::decode(&buf, &format!("block {block}")) {
        Ok(header) if header.segno == seg => Ok(Some((FoundRecord { block, header }, buf))),
        // A torn or stale record is the end of the log, not an error.
        _ => Ok(None),
    }
}

/// The records of segment `seg` in order, stopping at the first block that is
/// not a valid record with a higher sequence number than the one before (so
/// records left from an earlier use of the segment are not listed).
pub fn segment_records(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    seg: u64,
) -> Result<Vec<FoundRecord>> {
    Ok(segment_record_spans(dev, geo, fs_id, seg)?
        .into_iter()
        .map(|(r, _)| r)
        .collect())
}

/// [`segment_records`], each with its blocks as read (its whole span).
pub fn segment_record_spans(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    seg: u64,
) -> Result<Vec<(FoundRecord, Vec<u8>)>> {
    let start = geo.segment_start(seg);
    let end = start + geo.segment_blocks as u64;
    let mut out: Vec<(FoundRecord, Vec<u8>)> = Vec::new();
    let mut block = start;
    while block < end {
        let Some((r, span)) = read_record_span(dev, geo, fs_id, block, None)? else {
            break;
        };
        if out
            .last()
            .is_some_and(|(p, _)| p.header.seq >= r.header.seq)
        {
            break;
        }
        block = r.end_block();
        out.push((r, span));
    }
    Ok(out)
}

/// Follow the log from the record `from` onwards: each next record has the
/// next sequence number (after the `seq_gap` numbers that data-stream
/// records, written elsewhere, took in between), is not a data-stream
/// record, and starts right after the previous one, or at the start of the
/// segment the previous record named as next. Returns the records after
/// `from`, in order, up to the first gap; the data-stream records an fsync
/// record names come right before it (flagged `FLAG_DATA_STREAM`).
pub fn follow_chain(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    from: &FoundRecord,
) -> Result<Vec<FoundRecord>> {
    let mut out = Vec::new();
    let mut prev = from.clone();
    // Bounded by the device: a chain longer than the log area would loop.
    let max_records = geo.total_segment_blocks() / 2;
    while (out.len() as u64) < max_records {
        let after = prev.header.seq;
        let successor = |r: Option<FoundRecord>| {
            r.filter(|r| {
                r.header.flags & FLAG_DATA_STREAM == 0
                    && Some(r.header.seq) == after.checked_add(1 + r.header.seq_gap as u64)
            })
        };
        let next = match successor(read_record(dev, geo, fs_id, prev.end_block(), None)?) {
            Some(r) => Some(r),
            None if prev.header.next_seg < geo.nsegments => successor(read_record(
                dev,
                geo,
                fs_id,
                geo.segment_start(prev.header.next_seg),
                None,
            )?),
            None => None,
        };
        let Some(r) = next else { break };
        // An fsync record that put its data in stream records counts only
        // if they are there too: one flush covered them all.
        let Some(refs) = stream_records_of(dev, geo, fs_id, &r)? else {
            break;
        };
        out.extend(refs);
        out.push(r.clone());
        prev = r;
    }
    Ok(out)
}

/// The data-stream records chain record `r` names (`Item::StreamRecord`),
/// read and verified, in order: `Ok(None)` if one is not there whole (the
/// crash came before their flush), an error if `r`'s items do not decode.
fn stream_records_of(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    r: &FoundRecord,
) -> Result<Option<Vec<FoundRecord>>> {
    if r.header.inline.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let what = format!("record at block {} (sequence {})", r.block, r.header.seq);
    let mut out = Vec::new();
    for it in items::decode(&r.header.inline, &what)? {
        let Item::StreamRecord {
            block,
            seq,
            nblocks,
        } = it
        else {
            continue;
        };
        // Written before `r` (the sequence numbers `r`'s gap skips).
        if seq >= r.header.seq || seq + r.header.seq_gap as u64 + 1 < r.header.seq {
            return Err(Error::corrupt(format!(
                "{what} names a stream record of sequence {seq}, outside its gap"
            )));
        }
        match read_record(dev, geo, fs_id, block, Some(seq))? {
            Some(s) if s.header.flags & FLAG_DATA_STREAM != 0 && s.header.nblocks == nblocks => {
                out.push(s)
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// Like [`segment_records`], but reads only each record's header and summary
/// blocks, not its payload, and so does not verify the payload's CRC. For
/// callers that check every entry against the DAT before acting on it.
pub fn segment_summaries(
    dev: &mut dyn BlockDevice,
    geo: &Geometry,
    fs_id: u64,
    seg: u64,
) -> Result<Vec<FoundRecord>> {
    let start = geo.segment_start(seg);
    let end = start + geo.segment_blocks as u64;
    let mut out: Vec<FoundRecord> = Vec::new();
    let mut block = start;
    let mut first = vec![0; geo.block_bytes];
    while block < end {
        dev.read_at(geo.byte_offset(block), &mut first)?;
        let Some((_, seq, nblocks, nsum)) = RecordHeader::peek(&first, fs_id) else {
            break;
        };
        if out.last().is_some_and(|p| p.header.seq >= seq)
            || nsum == 0
            || nsum > nblocks
            || nblocks as usize > MAX_RECORD_BLOCKS
            || block + nblocks as u64 > end
        {
            break;
        }
        let mut sum = vec![0; nsum as usize * geo.block_bytes];
        dev.read_at(geo.byte_offset(block), &mut sum)?;
        match RecordHeader::decode_summary(&sum) {
            Ok(header) if header.segno == seg && header.nblocks == nblocks => {
                block += nblocks as u64;
                out.push(FoundRecord {
                    block: block - nblocks as u64,
                    header,
                });
            }
            _ => break,
        }
    }
    Ok(out)
}
