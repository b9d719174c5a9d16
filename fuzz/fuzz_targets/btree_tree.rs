//! B-tree operations over fuzzed nodes: lookups, a full walk, the structural
//! check, then inserts and removes (copy-on-write into new nodes). Node `p`
//! (pointers from 1) is the input's `p`-th 128-byte block after `flags u8,
//! ops u8, key u64`; flag 1 reseals every node's checksum. A damaged tree must
//! give errors, never a panic, a loop or unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_core::btree::{BTree, NodeStore};
use lsfs_core::codec::crc_with_hole;
use lsfs_core::error::{Error, Result};

const BLOCK_BYTES: usize = 128;
/// New nodes the mutations may allocate before the store refuses.
const MAX_NODES: usize = 256;

struct Mem {
    nodes: Vec<Vec<u8>>,
}

impl Mem {
    fn slot(&mut self, ptr: u64) -> Result<&mut Vec<u8>> {
        let i = ptr.checked_sub(1).ok_or_else(|| Error::corrupt("null pointer"))?;
        self.nodes
            .get_mut(i as usize)
            .ok_or_else(|| Error::corrupt(format!("pointer {ptr} past the store")))
    }
}

impl NodeStore for Mem {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        self.slot(ptr).map(|b| b.clone())
    }
    fn make_writable(&mut self, ptr: u64) -> Result<u64> {
        let b = self.slot(ptr)?.clone();
        let n = self.alloc_node()?;
        *self.slot(n)? = b;
        Ok(n)
    }
    fn write_node(&mut self, ptr: u64, block: Vec<u8>) -> Result<()> {
        assert_eq!(block.len(), BLOCK_BYTES, "the tree writes whole nodes");
        *self.slot(ptr)? = block;
        Ok(())
    }
    fn alloc_node(&mut self) -> Result<u64> {
        if self.nodes.len() >= MAX_NODES {
            return Err(Error::corrupt("store full"));
        }
        self.nodes.push(vec![0; BLOCK_BYTES]);
        Ok(self.nodes.len() as u64)
    }
    fn free_node(&mut self, ptr: u64) -> Result<()> {
        self.slot(ptr).map(|_| ())
    }
}

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    let (flags, ops) = (data[0], data[1]);
    let key = u64::from_le_bytes(data[2..10].try_into().unwrap());
    let mut nodes: Vec<Vec<u8>> = data[10..]
        .chunks(BLOCK_BYTES)
        .take(64)
        .map(|c| {
            let mut b = c.to_vec();
            b.resize(BLOCK_BYTES, 0);
            if flags & 1 != 0 {
                let crc = crc_with_hole(&b, 8);
                b[8..12].copy_from_slice(&crc.to_le_bytes());
            }
            b
        })
        .collect();
    if nodes.is_empty() {
        nodes.push(vec![0; BLOCK_BYTES]);
    }
    let mut s = Mem { nodes };
    let t = BTree::new(BLOCK_BYTES).unwrap();
    let root = 1;
    let _ = t.get(&mut s, root, key);
    let _ = t.floor(&mut s, root, key);
    let _ = t.ceil(&mut s, root, key);
    let mut visited = 0usize;
    let _ = t.visit(&mut s, root, &mut |_| {
        visited += 1;
        Ok(())
    });
    assert!(visited <= s.nodes.len(), "the walk saw a node twice");
    let checked = t.check(&mut s, root).is_ok();
    let mut root = root;
    for i in 0..(ops & 15) as u64 {
        let k = key.wrapping_add(i.wrapping_mul(0x9e37_79b9));
        let r = if ops & 16 != 0 && i % 2 == 1 {
            t.remove(&mut s, &mut root, k).map(|_| ())
        } else {
            t.insert(&mut s, &mut root, k, &[i as u8; 20]).map(|_| ())
        };
        if r.is_err() {
            return;
        }
    }
    // A tree that passed the check stays valid through successful changes.
    if checked {
        t.check(&mut s, root).expect("a checked tree stays valid after inserts and removes");
    }
});
