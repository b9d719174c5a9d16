//! B-tree node decoding. Input: `flags u8`, then the block. Bits 1-2 of the
//! flags pick the block size (128, 256, 1024 or 4096 bytes; the input is cut
//! or zero-padded to it, unless flag 8 keeps its length); flag 1 reseals the
//! node checksum. A node that decodes must re-encode to the identical block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::btree::Node;
use lsfs_core::codec::crc_with_hole;

const SIZES: [usize; 4] = [128, 256, 1024, 4096];

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let block_bytes = SIZES[(flags as usize >> 1) & 3];
    let mut b = rest.to_vec();
    if flags & 8 == 0 {
        b.resize(block_bytes, 0);
    }
    if flags & 1 != 0 && b.len() >= 12 {
        let crc = crc_with_hole(&b, 8);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(node) = Node::decode(&b, block_bytes) else {
        return;
    };
    assert!(node.fits(block_bytes));
    assert!(!node.is_empty());
    assert_eq!(node.key_at(0), node.first_key());
    let _ = node.key_at(node.len());
    assert_eq!(node.encode(block_bytes), b, "decode then encode changed the block");
});
