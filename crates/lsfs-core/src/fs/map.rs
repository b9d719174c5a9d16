//! A file's sorted map from `u64` keys to small values, stored inline in the
//! inode area while it fits (`INLINE_MAP`) and as a B-tree otherwise
//! (`BTREE`). Files keep their extents here, directories their entries.

use crate::btree::NodeStore;
use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::fs::inode::{Format, Inode, AREA_BYTES};
use crate::meta::store::{Store, VNodes, VNodesRo};

pub(crate) fn decode_inline(area: &[u8]) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut r = Reader::new(area, "inline map");
    if area.is_empty() {
        return Ok(Vec::new());
    }
    let n = r.u16()? as usize;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let k = r.u64()?;
        let l = r.u16()? as usize;
        items.push((k, r.bytes(l)?.to_vec()));
    }
    Ok(items)
}

fn encode_inline(items: &[(u64, Vec<u8>)]) -> Option<Vec<u8>> {
    let bytes: usize = 2 + items.iter().map(|(_, v)| 10 + v.len()).sum::<usize>();
    if bytes > AREA_BYTES {
        return None;
    }
    let mut w = Writer::with_capacity(bytes);
    w.u16(items.len() as u16);
    for (k, v) in items {
        w.u64(*k).u16(v.len() as u16).bytes(v);
    }
    Some(w.finish())
}

/// Read access to an inode's map (works for any checkpoint's inode).
pub fn get_floor(s: &mut Store, ino: &Inode, key: u64) -> Result<Option<(u64, Vec<u8>)>> {
    match ino.format {
        Format::BTree => {
            let tree = s.tree();
            tree.floor(&mut VNodesRo { s }, ino.map_root, key)
        }
        Format::InlineMap => Ok(decode_inline(&ino.area)?
            .into_iter()
            .rev()
            .find(|(k, _)| *k <= key)),
        Format::InlineData => Ok(None),
    }
}

pub fn get_ceil(s: &mut Store, ino: &Inode, key: u64) -> Result<Option<(u64, Vec<u8>)>> {
    match ino.format {
        Format::BTree => {
            let tree = s.tree();
            tree.ceil(&mut VNodesRo { s }, ino.map_root, key)
        }
        Format::InlineMap => Ok(decode_inline(&ino.area)?
            .into_iter()
            .find(|(k, _)| *k >= key)),
        Format::InlineData => Ok(None),
    }
}

/// Up to `max` items with keys `>= key`, in order; fewer does not mean the
/// end, empty does ([`crate::btree::BTree::ceil_run`]).
pub fn get_ceil_run(
    s: &mut Store,
    ino: &Inode,
    key: u64,
    max: usize,
) -> Result<Vec<(u64, Vec<u8>)>> {
    match ino.format {
        Format::BTree => {
            let tree = s.tree();
            tree.ceil_run(&mut VNodesRo { s }, ino.map_root, key, max)
        }
        Format::InlineMap => Ok(decode_inline(&ino.area)?
            .into_iter()
            .filter(|(k, _)| *k >= key)
            .take(max)
            .collect()),
        Format::InlineData => Ok(Vec::new()),
    }
}

pub fn get(s: &mut Store, ino: &Inode, key: u64) -> Result<Option<Vec<u8>>> {
    Ok(get_floor(s, ino, key)?
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v))
}

/// Insert or replace; converts an inline map to a B-tree when it outgrows the inode.
pub fn insert(s: &mut Store, ino: &mut Inode, key: u64, value: &[u8]) -> Result<()> {
    debug_assert!(ino.format != Format::InlineData);
    if ino.format == Format::InlineMap {
        let mut items = decode_inline(&ino.area)?;
        match items.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => items[i].1 = value.to_vec(),
            Err(i) => items.insert(i, (key, value.to_vec())),
        }
        if let Some(area) = encode_inline(&items) {
            ino.area = area;
            return Ok(());
        }
        // Outgrown: move every item into a new B-tree.
        let tree = s.tree();
        let mut root = 0;
        let mut st = VNodes { s, ino: ino.ino };
        for (k, v) in &items {
            tree.insert(&mut st, &mut root, *k, v)?;
        }
        ino.format = Format::BTree;
        ino.map_root = root;
        ino.area.clear();
        return Ok(());
    }
    let tree = s.tree();
    tree.insert(
        &mut VNodes { s, ino: ino.ino },
        &mut ino.map_root,
        key,
        value,
    )?;
    Ok(())
}

pub fn remove(s: &mut Store, ino: &mut Inode, key: u64) -> Result<Option<Vec<u8>>> {
    match ino.format {
        Format::InlineMap => {
            let mut items = decode_inline(&ino.area)?;
            let old = items
                .binary_search_by_key(&key, |(k, _)| *k)
                .ok()
                .map(|i| items.remove(i).1);
            ino.area = encode_inline(&items).expect("a smaller map fits");
            Ok(old)
        }
        Format::BTree => {
            let tree = s.tree();
            tree.remove(&mut VNodes { s, ino: ino.ino }, &mut ino.map_root, key)
        }
        Format::InlineData => Ok(None),
    }
}

/// Free every node of an inode's map tree (its values are the caller's).
pub fn destroy_tree(s: &mut Store, root: u64, owner_ino: u64) -> Result<()> {
    if root == 0 {
        return Ok(());
    }
    let tree = s.tree();
    let mut ptrs = Vec::new();
    tree.visit(&mut VNodesRo { s }, root, &mut |v| {
        ptrs.push(v.ptr);
        Ok(())
    })?;
    let mut st = VNodes { s, ino: owner_ino };
    for p in ptrs {
        st.free_node(p)?;
    }
    Ok(())
}

/// Moves the items of `from`'s map with keys `>= key` into `to`'s map,
/// which must be empty: a B-tree is cut along one path
/// ([`crate::btree::BTree::split_off`]), an inline map in two. The nodes
/// keep the owner they were written for; as for a map handed whole to
/// another inode, nothing reads the owner of a map node to find it.
pub fn split_off(s: &mut Store, from: &mut Inode, key: u64, to: &mut Inode) -> Result<()> {
    debug_assert!(to.format == Format::InlineData && to.map_root == 0);
    match from.format {
        Format::BTree => {
            let tree = s.tree();
            let right =
                tree.split_off(&mut VNodes { s, ino: from.ino }, &mut from.map_root, key)?;
            to.format = Format::BTree;
            to.map_root = right;
        }
        Format::InlineMap => {
            let mut items = decode_inline(&from.area)?;
            let right = items.split_off(items.partition_point(|(k, _)| *k < key));
            from.area = encode_inline(&items).expect("a smaller map fits");
            to.format = Format::InlineMap;
            to.area = encode_inline(&right).expect("a smaller map fits");
        }
        Format::InlineData => {}
    }
    Ok(())
}
