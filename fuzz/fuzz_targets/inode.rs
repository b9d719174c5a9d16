//! Inode decoding. Input: `ino u64`, then the 512-byte slot (zero-padded).
//! An inode that decodes re-encodes to one that decodes the same, and its
//! inline map (if any) decodes without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::fs::inode::{Format, Inode};
use lsfs_core::fuzzing::{dir_entry, extent, inline_map};
use lsfs_core::meta::ifile::INODE_BYTES;

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let ino = u64::from_le_bytes(data[..8].try_into().unwrap());
    let mut slot = data[8..].to_vec();
    if slot.len() < INODE_BYTES {
        slot.resize(INODE_BYTES, 0);
    }
    let Ok(inode) = Inode::decode(&slot, ino) else {
        return;
    };
    let _ = inode.attr();
    let _ = inode.kind();
    let enc = inode.encode();
    assert_eq!(enc.len(), INODE_BYTES);
    assert_eq!(Inode::decode(&enc, ino).expect("re-encoded inode"), inode);
    if inode.format == Format::InlineMap {
        if let Ok(items) = inline_map(&inode.area) {
            for (k, v) in items {
                let _ = dir_entry(k, &v);
                let _ = extent(k, &v);
            }
        }
    }
});
