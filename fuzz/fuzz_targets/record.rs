//! Log record decoding: header, summary entries, inline items, payload
//! checksum, and the super root block. Input: `flags u8`, then the record's
//! first bytes; the record is padded with zeros to the size its header
//! claims (at most `MAX_BLOCKS`), so short inputs reach the payload checks.
//! Flag 1 reseals the record checksum; flag 2 also decodes each payload block
//! as a super root (resealed if flag 4). Inline items that decode re-encode
//! to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::codec::crc_with_hole;
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_core::log::items;
use lsfs_core::log::record::{summary_blocks_with, RecordHeader};
use lsfs_core::log::super_root::SuperRoot;

const MAX_BLOCKS: usize = 16;

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let claimed = rest
        .get(48..52)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .unwrap_or(0);
    let blocks = claimed.clamp(rest.len().div_ceil(BLOCK_BYTES), MAX_BLOCKS);
    let mut buf = rest.to_vec();
    if buf.len() < blocks * BLOCK_BYTES {
        buf.resize(blocks * BLOCK_BYTES, 0);
    }
    if flags & 4 != 0 {
        for b in buf.chunks_exact_mut(BLOCK_BYTES).skip(1) {
            let crc = crc_with_hole(b, BLOCK_BYTES - 4);
            b[BLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    if flags & 1 != 0 && buf.len() >= 12 {
        let n = (claimed * BLOCK_BYTES).min(buf.len());
        let crc = crc_with_hole(&buf[..n.max(12)], 8);
        buf[8..12].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = RecordHeader::peek(&buf, 0);
    let _ = RecordHeader::decode_summary(&buf);
    let Ok(h) = RecordHeader::decode(&buf, "fuzz") else {
        return;
    };
    assert_eq!(h.entries.len() + h.nsum_blocks as usize, h.nblocks as usize);
    assert_eq!(
        summary_blocks_with(h.entries.len(), h.inline.len()),
        h.nsum_blocks as usize
    );
    if let Ok(its) = items::decode(&h.inline, "fuzz") {
        assert_eq!(items::encode(&its), h.inline, "items re-encode to their bytes");
        for it in &its {
            let _ = items::describe(it);
        }
    }
    let nsum = h.nsum_blocks as usize;
    let payload: Vec<&[u8]> = buf[nsum * BLOCK_BYTES..h.nblocks as usize * BLOCK_BYTES]
        .chunks_exact(BLOCK_BYTES)
        .collect();
    if flags & 2 != 0 {
        for p in &payload {
            if let Ok(sr) = SuperRoot::decode(p, "fuzz") {
                assert_eq!(SuperRoot::decode(&sr.encode(), "re-encoded").unwrap(), sr);
            }
        }
    }
    // Re-encoding gives a record that decodes to the same header.
    let again = RecordHeader::decode(&h.encode(&payload), "re-encoded").expect("re-encoded record");
    assert_eq!(again, h);
});
