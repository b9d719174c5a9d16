//! Directory and map items: a B-tree leaf (or an inode's inline map) whose
//! items are decoded as directory entries, file extents and xattr heads.
//! Input: `flags u8`, then the leaf block (4096 bytes, zero-padded, flag 1
//! reseals its checksum) or, with flag 2, an inline map area.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::btree::Node;
use lsfs_core::codec::crc_with_hole;
use lsfs_core::fs::dir::name_hash;
use lsfs_core::fuzzing::{dir_entry, extent, inline_map, xattr_head};

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let items = if flags & 2 != 0 {
        match inline_map(rest) {
            Ok(items) => items,
            Err(_) => return,
        }
    } else {
        let mut b = rest.to_vec();
        b.resize(4096, 0);
        if flags & 1 != 0 {
            let crc = crc_with_hole(&b, 8);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
        }
        match Node::decode(&b, 4096) {
            Ok(Node::Leaf { items }) => items.into_iter().map(|(k, v)| (k, v.into_vec())).collect(),
            _ => return,
        }
    };
    for (key, value) in &items {
        if let Ok(e) = dir_entry(*key, value) {
            assert_eq!(e.key, *key);
            assert!(!e.name.is_empty() && e.name.len() <= lsfs_vfs::NAME_MAX_BYTES);
            let _ = name_hash(&e.name);
        }
        if let Ok(x) = extent(*key, value) {
            assert!(x.len > 0 && x.vstart != 0);
        }
        let _ = xattr_head(*key, value);
    }
});
