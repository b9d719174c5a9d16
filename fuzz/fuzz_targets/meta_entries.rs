//! DAT, SUFILE, CPFILE and DAT journal blocks. Input: `which u8, idx u64,
//! nsegments u16`, then the block (zero-padded to 4096 bytes).
//! which % 4 = 0: every DAT entry slot (and a few past the block's end);
//! 1: SUFILE block `idx` of a table of `nsegments` segments (idx is kept
//! below the table's block count, as the engine does); 2: CPFILE block `idx`
//! (any value: the engine takes it from a B-tree key on disk); 3: a DAT
//! journal block (what decodes re-encodes to the same bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_core::meta::cpfile::{CpTable, CP_PER_BLOCK};
use lsfs_core::meta::dat_entry::{DatEntry, DAT_PER_BLOCK};
use lsfs_core::meta::dat_journal;
use lsfs_core::meta::sufile::SegTable;

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let which = data[0] % 4;
    let idx = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let nsegments = u16::from_le_bytes([data[9], data[10]]) as u64 + 1;
    let mut block = data[11..].to_vec();
    block.resize(BLOCK_BYTES, 0);
    match which {
        0 => {
            for slot in 0..DAT_PER_BLOCK as usize + 2 {
                match DatEntry::read(&block, slot) {
                    Ok(e) => {
                        assert!(slot < DAT_PER_BLOCK as usize);
                        let _ = (e.is_free(), e.is_current());
                        let mut b = vec![0; BLOCK_BYTES];
                        e.write(&mut b, slot);
                        assert_eq!(DatEntry::read(&b, slot).unwrap(), e);
                    }
                    Err(_) => assert!(slot >= DAT_PER_BLOCK as usize),
                }
            }
        }
        1 => {
            let mut t = SegTable::new(nsegments, 64);
            let idx = idx % t.nblocks_sufile();
            if t.decode_block(idx, &block).is_ok() {
                let again = t.encode_block(idx);
                let mut t2 = SegTable::new(nsegments, 64);
                t2.decode_block(idx, &again).unwrap();
                assert_eq!(t.usage, t2.usage);
                let _ = (t.free_count(), t.find_free(idx));
            }
        }
        3 => {
            if let Ok(entries) = dat_journal::decode_block(&block, "fuzz") {
                assert_eq!(dat_journal::encode_blocks(&entries), vec![block.clone()]);
            }
        }
        _ => {
            let mut t = CpTable::default();
            if t.decode_block(idx, &block).is_ok() {
                for (&cno, e) in &t.entries {
                    assert_eq!(cno / CP_PER_BLOCK, idx);
                    let _ = e.is_snapshot();
                }
                let _ = t.latest();
                let _ = t.snapshots();
                if let Some(again) = t.encode_block(idx) {
                    let mut t2 = CpTable::default();
                    t2.decode_block(idx, &again).unwrap();
                    assert_eq!(t.entries.len(), t2.entries.len());
                }
            }
        }
    }
});
