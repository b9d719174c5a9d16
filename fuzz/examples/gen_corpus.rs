//! Writes `fuzz/base-image.rle` (the image the `image` target patches) and
//! the seed corpus `fuzz/corpus/<target>/seed-*`, all small. Run from `fuzz/`:
//! `cargo run --example gen_corpus`. Deterministic apart from the base
//! image's fs_id and times (a new base image invalidates old `image` inputs).

use lsfs_core::btree::Node;
use lsfs_core::device::MemDevice;
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_core::log::chain::segment_records;
use lsfs_core::log::superblock::Superblock;
use lsfs_core::layout::Geometry;
use lsfs_fuzz::{build_image, rle_encode, Base, ImageInput, Patch};
use std::path::Path;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

/// Trailing zero bytes cut: the targets pad inputs with zeros.
fn trim(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    &b[..end]
}

fn main() {
    if !Path::new("Cargo.toml").exists() || !Path::new("fuzz_targets").exists() {
        panic!("run from the fuzz/ directory");
    }
    let img = build_image();
    std::fs::write("base-image.rle", rle_encode(&img)).unwrap();
    let base = Base::new(img.clone());
    let blk = |b: u64| &img[b as usize * BLOCK_BYTES..(b as usize + 1) * BLOCK_BYTES];

    // superblock: flags (1 = reseal), device bytes, block.
    let sb_block = blk(0);
    let mut s = vec![0u8];
    s.extend_from_slice(&(img.len() as u64).to_le_bytes());
    s.extend_from_slice(sb_block);
    write("superblock", "primary", &s);
    s[0] = 3;
    let cut = 9 + trim(&sb_block[..BLOCK_BYTES - 4]).len();
    write("superblock", "primary-resealed", &s[..cut]);

    // Walk the log: records, super roots, B-tree nodes, inodes.
    let sb = Superblock::decode(sb_block, "base", img.len() as u64).unwrap();
    let geo = Geometry::for_device(img.len() as u64, sb.segment_blocks).unwrap();
    let mut dev = MemDevice::from_bytes(img.clone());
    let mut records = Vec::new();
    for seg in 0..geo.nsegments {
        records.extend(segment_records(&mut dev, &geo, sb.fs_id, seg).unwrap());
    }
    let (mut nrec, mut nleaf, mut ninternal, mut ndir) = (0, 0, 0, 0);
    let mut inodes = 0;
    for r in &records {
        let start = r.block as usize * BLOCK_BYTES;
        let nsum = r.header.nsum_blocks as usize;
        if nrec < 4 && r.header.nblocks <= 4 {
            let mut rec = vec![1u8];
            rec.extend_from_slice(&img[start..start + r.header.nblocks as usize * BLOCK_BYTES]);
            write("record", &format!("record-{nrec}"), &rec);
            nrec += 1;
        }
        if r.header.flags & lsfs_core::log::record::FLAG_DSYNC != 0 && !r.header.inline.is_empty() {
            // fsync records with inline items: their summary blocks, the
            // payload left as zeros and the record resealed by the target.
            let mut rec = vec![1u8];
            rec.extend_from_slice(trim(&img[start..start + nsum * BLOCK_BYTES]));
            write("record", &format!("items-{}", r.header.seq), &rec);
        }
        if r.header.flags & lsfs_core::log::record::FLAG_SUPER_ROOT != 0 && nrec < 6 {
            // Summary block only, resealed by the target; payload as zeros
            // except the super root, so the seed stays small.
            let mut rec = vec![7u8];
            rec.extend_from_slice(trim(&img[start..start + nsum * BLOCK_BYTES]));
            write("record", &format!("summary-{nrec}"), &rec);
            nrec += 1;
        }
        for (i, e) in r.header.entries.iter().enumerate() {
            let b = blk(r.payload_block(i));
            let is_node = b[..2] == lsfs_core::btree::NODE_MAGIC.to_le_bytes();
            if is_node {
                if let Ok(n) = Node::decode(b, BLOCK_BYTES) {
                    let mut seed = vec![1u8 | (3 << 1)];
                    seed.extend_from_slice(trim(b));
                    if n.is_leaf() && nleaf < 4 {
                        write("btree_node", &format!("leaf-{nleaf}"), &seed);
                        nleaf += 1;
                    } else if !n.is_leaf() && ninternal < 2 {
                        write("btree_node", &format!("internal-{ninternal}"), &seed);
                        ninternal += 1;
                    }
                    // Directory leaves: values that decode as entries.
                    if let Node::Leaf { items } = &n {
                        let dirlike = items
                            .iter()
                            .all(|(k, v)| lsfs_core::fuzzing::dir_entry(*k, v).is_ok());
                        if dirlike && ndir < 2 {
                            let mut seed = vec![1u8];
                            seed.extend_from_slice(trim(b));
                            write("dir_block", &format!("leaf-{ndir}"), &seed);
                            ndir += 1;
                        }
                    }
                }
            }
            if e.ino == lsfs_core::layout::IFILE_INO && !is_node && inodes < 6 {
                for slot in 0..8u64 {
                    let ino = e.offset * 8 + slot;
                    let s = &b[slot as usize * 512..(slot as usize + 1) * 512];
                    if ino != 0 && s.iter().any(|&x| x != 0) && inodes < 6 {
                        let mut seed = ino.to_le_bytes().to_vec();
                        seed.extend_from_slice(trim(s));
                        write("inode", &format!("ino-{ino}"), &seed);
                        inodes += 1;
                        // Its inline map as a dir_block seed (flag 2).
                        let inode = lsfs_core::fs::inode::Inode::decode(s, ino).unwrap();
                        if inode.format == lsfs_core::fs::inode::Format::InlineMap {
                            let mut seed = vec![2u8];
                            seed.extend_from_slice(&inode.area);
                            write("dir_block", &format!("inline-{ino}"), &seed);
                        }
                    }
                }
            }
        }
    }
    write("dir_block", "empty-inline", &[2]);

    // btree_tree: a two-level tree of 128-byte nodes, built by the engine's own code.
    {
        use lsfs_core::btree::{BTree, NodeStore};
        struct Mem(Vec<Vec<u8>>);
        impl NodeStore for Mem {
            fn read_node(&mut self, p: u64) -> lsfs_core::Result<Vec<u8>> {
                Ok(self.0[p as usize - 1].clone())
            }
            fn make_writable(&mut self, p: u64) -> lsfs_core::Result<u64> {
                Ok(p)
            }
            fn write_node(&mut self, p: u64, b: Vec<u8>) -> lsfs_core::Result<()> {
                self.0[p as usize - 1] = b;
                Ok(())
            }
            fn alloc_node(&mut self) -> lsfs_core::Result<u64> {
                self.0.push(vec![0; 128]);
                Ok(self.0.len() as u64)
            }
            fn free_node(&mut self, _: u64) -> lsfs_core::Result<()> {
                Ok(())
            }
        }
        let t = BTree::new(128).unwrap();
        for (name, n) in [("leaf", 2u64), ("two-level", 12), ("three-level", 40)] {
            let mut m = Mem(Vec::new());
            let mut root = 0;
            for k in 0..n {
                t.insert(&mut m, &mut root, k * 10, &[k as u8; 6]).unwrap();
            }
            // The target's root is node 1: move the root there.
            let r = root as usize - 1;
            m.0.swap(0, r);
            let fix = |p: u64| if p == 1 { root } else if p == root { 1 } else { p };
            for b in m.0.iter_mut() {
                if let Ok(Node::Internal { level, children }) = Node::decode(b, 128) {
                    let children = children.into_iter().map(|(k, p)| (k, fix(p))).collect();
                    *b = Node::Internal { level, children }.encode(128);
                }
            }
            let mut seed = vec![0u8, 0x13];
            seed.extend_from_slice(&25u64.to_le_bytes());
            for b in &m.0 {
                seed.extend_from_slice(b);
            }
            write("btree_tree", name, &seed);
        }
    }

    // meta_entries: DAT, SUFILE and CPFILE blocks from the image.
    let mut seeded = [false; 3];
    for r in &records {
        for (i, e) in r.header.entries.iter().enumerate() {
            let which = match e.ino {
                lsfs_core::layout::DAT_INO => 0u8,
                lsfs_core::layout::SUFILE_INO => 1,
                lsfs_core::layout::CPFILE_INO => 2,
                _ => continue,
            };
            let b = blk(r.payload_block(i));
            if seeded[which as usize] || b[..2] == lsfs_core::btree::NODE_MAGIC.to_le_bytes() {
                continue;
            }
            seeded[which as usize] = true;
            let mut seed = vec![which];
            seed.extend_from_slice(&e.offset.to_le_bytes());
            seed.extend_from_slice(&((geo.nsegments - 1) as u16).to_le_bytes());
            seed.extend_from_slice(trim(b));
            write("meta_entries", &format!("{}", ["dat", "sufile", "cpfile"][which as usize]), &seed);
        }
    }

    // meta_entries: a DAT journal block of a few entries.
    let entries: Vec<(u64, lsfs_core::meta::dat_entry::DatEntry)> = (1..6u64)
        .map(|v| {
            let e = lsfs_core::meta::dat_entry::DatEntry {
                pblock: 100 + v,
                start: v,
                end: u64::MAX,
                prev_start: 0,
                refs: 0,
            };
            (v * 7, e)
        })
        .collect();
    let mut seed = vec![3u8];
    seed.extend_from_slice(&0u64.to_le_bytes());
    seed.extend_from_slice(&((geo.nsegments - 1) as u16).to_le_bytes());
    seed.extend_from_slice(trim(&lsfs_core::meta::dat_journal::encode_blocks(&entries)[0]));
    write("meta_entries", "dat-journal", &seed);

    // image: no patch, resealed no-op patches in a few structures, a checkpoint mount.
    let none = ImageInput { reseal: true, checkpoint: None, writable: false, patches: vec![] };
    write("image", "unchanged", &none.encode());
    let cp = ImageInput { reseal: true, checkpoint: Some(2), writable: false, patches: vec![] };
    write("image", "checkpoint-2", &cp.encode());
    let rw = ImageInput { reseal: true, checkpoint: None, writable: true, patches: vec![] };
    write("image", "writable", &rw.encode());
    let mut n = 0;
    for (i, &b) in base.used_blocks.iter().enumerate() {
        let first8 = &blk(b)[..8];
        let kind = if b == 0 {
            "superblock"
        } else if first8[..4] == 0x3152_534Cu32.to_le_bytes() {
            "record"
        } else if first8[..2] == lsfs_core::btree::NODE_MAGIC.to_le_bytes() {
            "node"
        } else {
            continue;
        };
        // Rewrite bytes 16..24 with their own value: a no-op patch that
        // points the fuzzer at the structure.
        let p = Patch { block_sel: i as u16, offset: 16, bytes: blk(b)[16..24].to_vec() };
        let input = ImageInput { reseal: true, checkpoint: None, writable: false, patches: vec![p] };
        write("image", &format!("{kind}-{n}"), &input.encode());
        n += 1;
        if n >= 8 {
            break;
        }
    }
    println!(
        "wrote base-image.rle ({} KiB image, {} used blocks, {} records) and corpus/",
        img.len() / 1024,
        base.used_blocks.len(),
        base.records.len()
    );
}
