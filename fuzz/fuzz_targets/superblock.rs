//! Superblock decoding: `flags u8, device_bytes u64, block bytes`.
//! Flag 1 reseals the checksum so mutations reach the field checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::codec::crc_with_hole;
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_core::log::superblock::{Superblock, LABEL_BYTES};

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let flags = data[0];
    let device_bytes = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let mut b = data[9..].to_vec();
    if flags & 2 != 0 && b.len() < BLOCK_BYTES {
        b.resize(BLOCK_BYTES, 0);
    }
    if flags & 1 != 0 && b.len() >= BLOCK_BYTES {
        let crc = crc_with_hole(&b[..BLOCK_BYTES], BLOCK_BYTES - 4);
        b[BLOCK_BYTES - 4..BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(sb) = Superblock::decode(&b, "fuzz", device_bytes) else {
        return;
    };
    // A superblock that decodes describes a geometry that fits the device.
    let g = sb.geometry();
    assert!(g.device_blocks * BLOCK_BYTES as u64 <= device_bytes);
    let seg = g.segment_of(sb.cp_record_block).expect("checkpoint block is in the log");
    let _ = g.segment_start(seg);
    let _ = g.second_superblock();
    // Re-encoding keeps every field (a label mangled by lossy UTF-8 may grow
    // past the field and be cut, so it is compared only when it fits).
    let again = Superblock::decode(&sb.encode(), "re-encoded", device_bytes)
        .expect("a re-encoded superblock decodes");
    if sb.label.len() <= LABEL_BYTES {
        assert_eq!(again, sb);
    } else {
        assert_eq!(again.sb_seq, sb.sb_seq);
    }
});
