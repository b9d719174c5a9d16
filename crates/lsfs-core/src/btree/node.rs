//! One B-tree node block: its decoded form and its on-disk encoding.
//!
//! # Node block layout
//!
//! A node is exactly one block of `block_bytes` bytes (4096 by default; any
//! size in [`Node::MIN_BLOCK_BYTES`]`..=`[`Node::MAX_BLOCK_BYTES`] works).
//! All integers are little-endian.
//!
//! Header, 16 bytes:
//!
//! | offset | size | field                                                   |
//! |-------:|-----:|---------------------------------------------------------|
//! |      0 |    2 | magic, [`NODE_MAGIC`] (`0xB7EE`)                        |
//! |      2 |    1 | level: 0 = leaf, `n` = parent of level `n - 1` nodes     |
//! |      3 |    1 | flags, must be 0                                        |
//! |      4 |    2 | nitems, at least 1 (empty nodes are never stored)       |
//! |      6 |    2 | reserved, must be 0                                     |
//! |      8 |    4 | crc32c of the whole block with this field taken as zero |
//! |     12 |    4 | reserved, must be 0                                     |
//!
//! Then `nitems` items, packed, keys strictly increasing:
//!
//! * leaf item: key `u64`, value length `u16`, value bytes (at most
//!   [`Node::max_value_bytes`]`(block_bytes)`);
//! * internal item (16 bytes): key `u64`, the exact minimum key of the child's
//!   subtree, then the child pointer `u64` (never 0).
//!
//! The rest of the block is zero. Decoding rejects anything else, so every
//! block that decodes re-encodes to the identical bytes.

use crate::btree::MAX_VALUE_BYTES;
use crate::error::{Error, Result};

/// First two bytes of every node block.
pub const NODE_MAGIC: u16 = 0xB7EE;

const CRC_OFFSET: usize = 8;

/// A leaf item's value. Inline up to 16 bytes (file extents are 12): a node
/// decoded for copy-on-write used to allocate once per item, a third of a
/// random overwrite's instructions (docs/PERFORMANCE.md).
pub type Value = smallvec::SmallVec<[u8; 16]>;

/// The decoded form of one node block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// Level 0: `(key, value)` items, keys strictly increasing.
    Leaf { items: Vec<(u64, Value)> },
    /// Level >= 1: `(minimum key of the child's subtree, child pointer)`.
    Internal {
        level: u8,
        children: Vec<(u64, u64)>,
    },
}

impl Node {
    pub const HEADER_BYTES: usize = 16;
    /// Leaf item bytes besides the value: key and value length.
    pub const LEAF_ITEM_OVERHEAD: usize = 10;
    pub const INTERNAL_ITEM_BYTES: usize = 16;
    pub const DEFAULT_BLOCK_BYTES: usize = 4096;
    /// Small enough for tests to build deep trees, big enough that an
    /// internal node holds several children.
    pub const MIN_BLOCK_BYTES: usize = 128;
    /// Value lengths and item counts are `u16`.
    pub const MAX_BLOCK_BYTES: usize = 65536;

    /// `Ok` if `block_bytes` is a node size this module supports.
    pub fn check_block_bytes(block_bytes: usize) -> Result<()> {
        if (Self::MIN_BLOCK_BYTES..=Self::MAX_BLOCK_BYTES).contains(&block_bytes) {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "B-tree block size {block_bytes} not in {}..={}",
                Self::MIN_BLOCK_BYTES,
                Self::MAX_BLOCK_BYTES
            )))
        }
    }

    /// Largest value a leaf of this block size accepts: [`MAX_VALUE_BYTES`],
    /// or less for small blocks, so that any two leaf items fit in one node
    /// (which is what makes a two-way leaf split always succeed).
    pub fn max_value_bytes(block_bytes: usize) -> usize {
        let half = block_bytes.saturating_sub(Self::HEADER_BYTES) / 2;
        MAX_VALUE_BYTES.min(half.saturating_sub(Self::LEAF_ITEM_OVERHEAD))
    }

    /// Most children an internal node of this block size holds.
    pub fn max_children(block_bytes: usize) -> usize {
        block_bytes.saturating_sub(Self::HEADER_BYTES) / Self::INTERNAL_ITEM_BYTES
    }

    /// Encoded bytes of one leaf item holding `value_len` bytes.
    pub fn leaf_item_bytes(value_len: usize) -> usize {
        Self::LEAF_ITEM_OVERHEAD + value_len
    }

    /// Encoded bytes of this node, header included (without padding).
    pub fn encoded_bytes(&self) -> usize {
        Self::HEADER_BYTES
            + match self {
                Node::Leaf { items } => items
                    .iter()
                    .map(|(_, v)| Self::leaf_item_bytes(v.len()))
                    .sum(),
                Node::Internal { children, .. } => children.len() * Self::INTERNAL_ITEM_BYTES,
            }
    }

    /// Whether this node encodes into one block of `block_bytes`.
    pub fn fits(&self, block_bytes: usize) -> bool {
        self.encoded_bytes() <= block_bytes
    }

    pub fn level(&self) -> u8 {
        match self {
            Node::Leaf { .. } => 0,
            Node::Internal { level, .. } => *level,
        }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self, Node::Leaf { .. })
    }

    /// Number of items (leaf) or children (internal).
    pub fn len(&self) -> usize {
        match self {
            Node::Leaf { items } => items.len(),
            Node::Internal { children, .. } => children.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the encoding passes `NodeRef::parse`: besides what `encode`
    /// guarantees (magic, crc, zero fields and padding, size), at least one
    /// item, strictly increasing keys and non-null children. A damaged tree
    /// can make the tree write a node that is not.
    pub fn is_well_formed(&self) -> bool {
        match self {
            Node::Leaf { items } => !items.is_empty() && items.windows(2).all(|w| w[0].0 < w[1].0),
            Node::Internal { children, .. } => {
                !children.is_empty()
                    && children.iter().all(|&(_, p)| p != 0)
                    && children.windows(2).all(|w| w[0].0 < w[1].0)
            }
        }
    }

    /// The node's smallest key, which is its whole subtree's smallest key.
    pub fn first_key(&self) -> Option<u64> {
        self.key_at(0)
    }

    /// The key of item `i`.
    pub fn key_at(&self, i: usize) -> Option<u64> {
        match self {
            Node::Leaf { items } => items.get(i).map(|(k, _)| *k),
            Node::Internal { children, .. } => children.get(i).map(|(k, _)| *k),
        }
    }

    /// The block for this node, zero-padded to `block_bytes`, crc set.
    ///
    /// Panics if the node does not fit or is malformed (an internal node at
    /// level 0, too many items): writing it would corrupt the image, and the
    /// tree code never builds such a node.
    pub fn encode(&self, block_bytes: usize) -> Vec<u8> {
        assert!(
            self.fits(block_bytes),
            "B-tree node does not fit in {block_bytes} bytes"
        );
        assert!(
            self.level() > 0 || self.is_leaf(),
            "internal B-tree node at level 0"
        );
        let nitems = u16::try_from(self.len()).expect("B-tree node item count fits u16");
        let mut b = Vec::with_capacity(block_bytes);
        b.extend_from_slice(&NODE_MAGIC.to_le_bytes());
        b.push(self.level());
        b.push(0); // flags
        b.extend_from_slice(&nitems.to_le_bytes());
        b.resize(Self::HEADER_BYTES, 0); // reserved, crc (set below), reserved
        match self {
            Node::Leaf { items } => {
                for (key, value) in items {
                    b.extend_from_slice(&key.to_le_bytes());
                    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
                    b.extend_from_slice(value);
                }
            }
            Node::Internal { children, .. } => {
                for (key, ptr) in children {
                    b.extend_from_slice(&key.to_le_bytes());
                    b.extend_from_slice(&ptr.to_le_bytes());
                }
            }
        }
        b.resize(block_bytes, 0);
        let crc = block_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and fully validates one node block. Never panics: anything
    /// malformed is an [`Error::Corrupt`] saying what is wrong.
    /// Set child pointer `i` of the internal node encoded in `block` (a
    /// node that parsed), and its crc: what re-encoding the decoded node
    /// with that change gives.
    pub fn set_child_in_block(block: &mut [u8], i: usize, ptr: u64) {
        assert!(block[2] > 0, "children are in internal nodes");
        assert!(i < u16::from_le_bytes([block[4], block[5]]) as usize);
        assert_ne!(ptr, 0, "child pointers are never null");
        let at = Self::HEADER_BYTES + i * Self::INTERNAL_ITEM_BYTES + 8;
        block[at..at + 8].copy_from_slice(&ptr.to_le_bytes());
        Node::seal(block);
    }

    /// Store the crc of the node in `block`.
    fn seal(block: &mut [u8]) {
        let crc = block_crc(block);
        block[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn decode(block: &[u8], block_bytes: usize) -> Result<Node> {
        Ok(NodeRef::parse(block, block_bytes)?.to_node())
    }
}

/// Whether `b` is all zero bytes (eight at a time: padding is most of a
/// sparsely filled block).
fn is_zero(b: &[u8]) -> bool {
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    words.fold(0, |acc, w| acc | u64::from_ne_bytes(w.try_into().unwrap())) == 0
        && tail.iter().all(|&x| x == 0)
}

/// A node block validated exactly as [`Node::decode`] validates it, its
/// items located but not copied. Lookups read through it and copy the one
/// value they return: decoding every item (an allocation each) took 16 %
/// of the server's CPU under 4 KiB random writes, in file-map lookups.
pub struct NodeRef<'a> {
    block: &'a [u8],
    level: u8,
    nitems: usize,
    /// Per leaf item: the key and the value's offset and length
    /// (`offset << 16 | length`). Empty in an internal node, whose items
    /// are read where they stand, at fixed offsets within the bounds
    /// checked: copying them out was a fifth of locating a node's items.
    items: Vec<(u64, u64)>,
}

impl<'a> NodeRef<'a> {
    /// Validates `block`: magic, crc, header fields, item bounds, value
    /// sizes, non-null children, strictly increasing keys, zero padding.
    pub fn parse(block: &'a [u8], block_bytes: usize) -> Result<NodeRef<'a>> {
        Self::parse_checked(block, block_bytes, true)
    }

    /// As [`NodeRef::parse`]; with `full` false, the checks that only a
    /// change of the bytes could break (crc, zero padding, key order) are
    /// skipped, for bytes that passed them before (`NodeStore::node_verified`).
    /// Bounds are always checked, so no byte pattern can cause a panic.
    pub fn parse_checked(block: &'a [u8], block_bytes: usize, full: bool) -> Result<NodeRef<'a>> {
        let (mut r, level, nitems) = Self::parse_header(block, block_bytes, full)?;
        let max_value = Node::max_value_bytes(block_bytes);
        let items = Self::parse_items(&mut r, level, nitems, max_value, full)?;
        if full && !is_zero(&block[r.pos..]) {
            return Err(Error::corrupt(format!(
                "B-tree node has nonzero bytes after its items at offset {}",
                r.pos
            )));
        }
        let n = NodeRef {
            block,
            level,
            nitems,
            items,
        };
        let disorder = || (1..n.len()).find(|&i| n.key(i - 1) >= n.key(i));
        if !full {
            debug_assert!(disorder().is_none(), "verified node changed");
        } else if let Some(i) = disorder() {
            return Err(Error::corrupt(format!(
                "B-tree node keys not strictly increasing at item {i}"
            )));
        }
        Ok(n)
    }

    /// The header: block size, magic, crc (if `full`), flags and reserved
    /// fields. Returns the reader past it, the level and the item count.
    fn parse_header(
        block: &'a [u8],
        block_bytes: usize,
        full: bool,
    ) -> Result<(Reader<'a>, u8, usize)> {
        Node::check_block_bytes(block_bytes)?;
        if block.len() != block_bytes {
            return Err(Error::corrupt(format!(
                "B-tree node block is {} bytes, expected {block_bytes}",
                block.len()
            )));
        }
        let mut r = Reader { b: block, pos: 0 };
        let magic = r.u16()?;
        if magic != NODE_MAGIC {
            return Err(Error::corrupt(format!(
                "B-tree node magic {magic:#06x}, expected {NODE_MAGIC:#06x}"
            )));
        }
        let stored = u32::from_le_bytes(block[CRC_OFFSET..CRC_OFFSET + 4].try_into().unwrap());
        let computed = if full { block_crc(block) } else { stored };
        if stored != computed {
            return Err(Error::corrupt(format!(
                "B-tree node crc {stored:#010x}, computed {computed:#010x}"
            )));
        }
        let level = r.u8()?;
        let flags = r.u8()?;
        let nitems = r.u16()? as usize;
        let reserved = (r.u16()?, r.u32()?, r.u32()?);
        if flags != 0 || reserved.0 != 0 || reserved.2 != 0 {
            return Err(Error::corrupt(
                "B-tree node has nonzero flags or reserved fields",
            ));
        }
        if nitems == 0 {
            return Err(Error::corrupt("B-tree node has no items"));
        }
        Ok((r, level, nitems))
    }

    /// Locate `nitems` items: keys, and child pointers (never null) or
    /// values within `max_value` bytes.
    /// Internal nodes' items stay where they are (see `items`); with
    /// `full` false their child pointers are not checked for null again.
    fn parse_items(
        r: &mut Reader<'a>,
        level: u8,
        nitems: usize,
        max_value: usize,
        full: bool,
    ) -> Result<Vec<(u64, u64)>> {
        match Self::parse_items_fast(r.b, r.pos, level, nitems, max_value, full) {
            Some((items, end)) => {
                r.pos = end;
                Ok(items)
            }
            // Something is wrong: the item by item parse says what.
            None => {
                let checked = Self::parse_items_checked(r, level, nitems, max_value);
                assert!(checked.is_err(), "the two item parses disagree");
                checked
            }
        }
    }

    /// [`NodeRef::parse_items`] of a well-formed node, from byte `pos` of
    /// `b`, with one bounds check per leaf item and one per internal node,
    /// on plain indices: every node read runs this loop over all its items,
    /// about ten nodes per random 4 KiB overwrite, and item by item through
    /// the checked reader it was a quarter of that overwrite's
    /// instructions. `None` at the first item that fails a check. Returns
    /// the items and the offset past them.
    #[inline]
    fn parse_items_fast(
        b: &[u8],
        pos: usize,
        level: u8,
        nitems: usize,
        max_value: usize,
        full: bool,
    ) -> Option<(Vec<(u64, u64)>, usize)> {
        if level > 0 {
            let end = pos.checked_add(nitems.checked_mul(Node::INTERNAL_ITEM_BYTES)?)?;
            let items = b.get(pos..end)?.chunks_exact(Node::INTERNAL_ITEM_BYTES);
            if full && items.into_iter().any(|item| item[8..] == [0; 8]) {
                return None;
            }
            return Some((Vec::new(), end));
        }
        let mut items = Vec::with_capacity(nitems);
        let mut pos = pos;
        for _ in 0..nitems {
            let head = b.get(pos..pos.checked_add(Node::LEAF_ITEM_OVERHEAD)?)?;
            let key = u64::from_le_bytes(head[..8].try_into().unwrap());
            let len = u16::from_le_bytes(head[8..].try_into().unwrap()) as usize;
            let at = pos + Node::LEAF_ITEM_OVERHEAD;
            if len > max_value || at + len > b.len() {
                return None;
            }
            items.push((key, (at as u64) << 16 | len as u64));
            pos = at + len;
        }
        Some((items, pos))
    }

    /// [`NodeRef::parse_items`] item by item through the checked reader,
    /// which names the first item that is wrong and how.
    #[cold]
    fn parse_items_checked(
        r: &mut Reader<'a>,
        level: u8,
        nitems: usize,
        max_value: usize,
    ) -> Result<Vec<(u64, u64)>> {
        let mut items = Vec::with_capacity(nitems);
        for i in 0..nitems {
            let key = r.u64()?;
            let second = if level == 0 {
                let len = r.u16()? as usize;
                if len > max_value {
                    return Err(Error::corrupt(format!(
                        "B-tree leaf item {i} value is {len} bytes, limit {max_value}"
                    )));
                }
                let at = r.pos as u64;
                r.bytes(len)?;
                at << 16 | len as u64
            } else {
                let ptr = r.u64()?;
                if ptr == 0 {
                    return Err(Error::corrupt(format!(
                        "B-tree internal item {i} has a null child pointer"
                    )));
                }
                ptr
            };
            items.push((key, second));
        }
        Ok(items)
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    /// Number of items (leaf) or children (internal); at least 1.
    pub fn len(&self) -> usize {
        self.nitems
    }

    pub fn key(&self, i: usize) -> u64 {
        if self.level == 0 {
            self.items[i].0
        } else {
            self.internal_item(i).0
        }
    }

    /// Key and child pointer of internal item `i`, read from the block
    /// (within the bounds the parse checked).
    #[inline]
    fn internal_item(&self, i: usize) -> (u64, u64) {
        assert!(i < self.nitems, "item {i} of {}", self.nitems);
        let at = Node::HEADER_BYTES + i * Node::INTERNAL_ITEM_BYTES;
        let item = &self.block[at..at + Node::INTERNAL_ITEM_BYTES];
        (
            u64::from_le_bytes(item[..8].try_into().unwrap()),
            u64::from_le_bytes(item[8..].try_into().unwrap()),
        )
    }

    /// The number of leading items whose key satisfies `pred` (which holds
    /// for a prefix of the keys, as they increase).
    fn partition(&self, pred: impl Fn(u64) -> bool) -> usize {
        if self.level == 0 {
            return self.items.partition_point(|&(k, _)| pred(k));
        }
        let (mut lo, mut hi) = (0, self.nitems);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.internal_item(mid).0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The value of leaf item `i`.
    pub fn value(&self, i: usize) -> &'a [u8] {
        debug_assert_eq!(self.level, 0, "values are in leaves");
        let v = self.items[i].1;
        let at = (v >> 16) as usize;
        &self.block[at..at + (v & 0xffff) as usize]
    }

    /// The child pointer of internal item `i`.
    pub fn child(&self, i: usize) -> u64 {
        assert!(self.level > 0, "children are in internal nodes");
        self.internal_item(i).1
    }

    /// The last item with key `<= key`.
    pub fn floor_index(&self, key: u64) -> Option<usize> {
        self.partition(|k| k <= key).checked_sub(1)
    }

    /// The first item with key `>= key` (`len()` if none).
    pub fn ceil_index(&self, key: u64) -> usize {
        self.partition(|k| k < key)
    }

    /// This leaf's block with `key` set to `value`, edited in its bytes:
    /// what encoding the decoded leaf with that change gives, without
    /// decoding and encoding every item. `None` when the leaf would need
    /// more: a split (it would not fit in `block_bytes`), or a new first
    /// key (its parent's key changes).
    pub fn with_leaf_item(&self, key: u64, value: &[u8], block_bytes: usize) -> Option<Vec<u8>> {
        assert_eq!(self.level, 0, "items are set in leaves");
        assert_eq!(self.block.len(), block_bytes);
        let pos = self.ceil_index(key);
        let exists = pos < self.len() && self.key(pos) == key;
        if pos == 0 && !exists {
            return None;
        }
        // The bytes of item `i`: its key and length, then its value.
        let start = |i: usize| (self.items[i].1 >> 16) as usize - Node::LEAF_ITEM_OVERHEAD;
        let end = |i: usize| {
            let v = self.items[i].1;
            (v >> 16) as usize + (v & 0xffff) as usize
        };
        let used = end(self.len() - 1);
        let (cut_from, cut_to) = match (exists, pos < self.len()) {
            (true, _) => (start(pos), end(pos)),
            (false, true) => (start(pos), start(pos)),
            (false, false) => (used, used),
        };
        let new_used = used - (cut_to - cut_from) + Node::leaf_item_bytes(value.len());
        if new_used > block_bytes {
            return None;
        }
        let nitems = self.len() + usize::from(!exists);
        let mut b = Vec::with_capacity(block_bytes);
        b.extend_from_slice(&self.block[..cut_from]);
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(&(value.len() as u16).to_le_bytes());
        b.extend_from_slice(value);
        b.extend_from_slice(&self.block[cut_to..used]);
        b.resize(block_bytes, 0);
        b[4..6].copy_from_slice(&u16::try_from(nitems).ok()?.to_le_bytes());
        Node::seal(&mut b);
        Some(b)
    }

    /// The decoded, owned node.
    pub fn to_node(&self) -> Node {
        if self.level == 0 {
            Node::Leaf {
                items: (0..self.len())
                    .map(|i| (self.key(i), Value::from_slice(self.value(i))))
                    .collect(),
            }
        } else {
            Node::Internal {
                level: self.level,
                children: (0..self.nitems).map(|i| self.internal_item(i)).collect(),
            }
        }
    }
}

/// crc32c of `block` with the crc field taken as zero.
fn block_crc(block: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&block[..CRC_OFFSET]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &block[CRC_OFFSET + 4..])
}

/// Bounds-checked little-endian reads; running off the block is corruption.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    // Inlined, with the error kept out of line: parsing a leaf reads every
    // item's key and length through these, and as calls they were a third
    // of the instructions of a 1 MiB append (op_cost under callgrind).
    #[inline]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.pos.checked_add(n).filter(|&e| e <= self.b.len()) {
            Some(end) => {
                let s = &self.b[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(past_end(self.pos, n)),
        }
    }
    #[inline]
    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    #[inline]
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().unwrap()))
    }
    #[inline]
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }
    #[inline]
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }
}

#[cold]
#[inline(never)]
fn past_end(pos: usize, n: usize) -> Error {
    Error::corrupt(format!(
        "B-tree node items run past the block end (offset {pos} + {n})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaf(items: &[(u64, usize)]) -> Node {
        Node::Leaf {
            items: items
                .iter()
                .map(|&(k, n)| (k, Value::from_elem(k as u8, n)))
                .collect(),
        }
    }

    /// `is_well_formed` says exactly whether the encoding parses: the tree
    /// marks nodes it writes as verified on its word.
    #[test]
    fn well_formed_agrees_with_parse() {
        let internal = |children: Vec<(u64, u64)>| Node::Internal { level: 1, children };
        let cases = [
            (leaf(&[(1, 3), (2, 0), (9, 5)]), true),
            (leaf(&[]), false),
            (leaf(&[(2, 1), (2, 1)]), false),
            (leaf(&[(3, 1), (2, 1)]), false),
            (internal(vec![(1, 7), (5, 8)]), true),
            (internal(vec![]), false),
            (internal(vec![(1, 7), (5, 0)]), false),
            (internal(vec![(5, 7), (1, 8)]), false),
        ];
        for (node, want) in cases {
            assert_eq!(node.is_well_formed(), want, "{node:?}");
            let parsed = NodeRef::parse(&node.encode(256), 256).is_ok();
            assert_eq!(parsed, want, "{node:?}");
        }
    }

    #[test]
    fn roundtrip_leaf_and_internal() {
        let l = leaf(&[(1, 0), (7, 3), (u64::MAX, 20)]);
        let b = l.encode(512);
        assert_eq!(b.len(), 512);
        assert_eq!(&b[..2], &NODE_MAGIC.to_le_bytes());
        assert_eq!(Node::decode(&b, 512).unwrap(), l);
        assert_eq!(l.encoded_bytes(), 16 + 10 + 13 + 30);
        let n = Node::Internal {
            level: 3,
            children: vec![(0, 9), (5, 10)],
        };
        assert_eq!(Node::decode(&n.encode(4096), 4096).unwrap(), n);
    }

    #[test]
    fn max_value_fits_twice() {
        for bb in [128, 256, 512, 4096, 65536] {
            let m = Node::max_value_bytes(bb);
            assert!(leaf(&[(1, m), (2, m)]).fits(bb), "{bb}");
        }
        assert_eq!(Node::max_value_bytes(4096), MAX_VALUE_BYTES);
    }

    fn corrupt_what(b: &[u8], bb: usize) -> String {
        match Node::decode(b, bb) {
            Err(Error::Corrupt { what }) => what,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    /// The fast item parse finds the items the checked one does, and
    /// refuses exactly what it refuses.
    fn item_parses_agree(b: &[u8], bb: usize) -> bool {
        let Ok((r, level, nitems)) = NodeRef::parse_header(b, bb, false) else {
            return true;
        };
        let max = Node::max_value_bytes(bb);
        let fast = NodeRef::parse_items_fast(r.b, r.pos, level, nitems, max, true);
        let mut r = r;
        let checked = NodeRef::parse_items_checked(&mut r, level, nitems, max);
        match (fast, checked) {
            // Internal items stay in the block: none are copied out.
            (Some((items, end)), Ok(_)) if level > 0 => items.is_empty() && end == r.pos,
            (Some((items, end)), Ok(expected)) => items == expected && end == r.pos,
            (None, Err(_)) => true,
            _ => false,
        }
    }

    /// Lookups in an internal node, whose items are read in place, find
    /// what they find in its decoded children.
    #[test]
    fn internal_lookups_read_in_place() {
        for n in 1..20u64 {
            let children: Vec<_> = (0..n).map(|c| (c * 3 + 1, c + 100)).collect();
            let block = Node::Internal {
                level: 2,
                children: children.clone(),
            }
            .encode(512);
            for full in [true, false] {
                let r = NodeRef::parse_checked(&block, 512, full).unwrap();
                assert_eq!(r.len(), n as usize);
                for key in 0..n * 3 + 3 {
                    let floor = children.partition_point(|c| c.0 <= key).checked_sub(1);
                    assert_eq!(r.floor_index(key), floor, "floor of {key} in {n}");
                    let ceil = children.partition_point(|c| c.0 < key);
                    assert_eq!(r.ceil_index(key), ceil, "ceil of {key} in {n}");
                }
                for (i, &(k, c)) in children.iter().enumerate() {
                    assert_eq!((r.key(i), r.child(i)), (k, c));
                }
            }
        }
    }

    #[test]
    fn both_item_parses_agree_on_named_defects() {
        let good = leaf(&[(1, 4), (2, 4)]).encode(256);
        assert!(item_parses_agree(&good, 256));
        let mut b = good.clone();
        b[4] = 200; // nitems far too large
        assert!(item_parses_agree(&b, 256));
        let mut b = good.clone();
        b[16 + 8] = 255; // first value's length past the limit
        assert!(item_parses_agree(&b, 256));
        let inner = Node::Internal {
            level: 1,
            children: vec![(1, 5), (2, 6)],
        };
        let mut b = inner.encode(256);
        assert!(item_parses_agree(&b, 256));
        b[16 + 24..16 + 32].fill(0); // second child null
        assert!(item_parses_agree(&b, 256));
    }

    #[test]
    fn rejects_named_defects() {
        let good = leaf(&[(1, 4), (2, 4)]).encode(256);
        assert!(corrupt_what(&good[..255], 256).contains("255 bytes"));
        let mut b = good.clone();
        b[0] ^= 1;
        assert!(corrupt_what(&b, 256).contains("magic"));
        let mut b = good.clone();
        b[40] ^= 1;
        assert!(corrupt_what(&b, 256).contains("crc"));
        // Structural defects behind a valid crc.
        let refix = |mut b: Vec<u8>| {
            let crc = block_crc(&b);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut b = good.clone();
        b[4] = 200; // nitems far too large
        assert!(corrupt_what(&refix(b), 256).contains("past the block end"));
        let mut b = good.clone();
        b[4] = 0;
        assert!(corrupt_what(&refix(b), 256).contains("no items"));
        let mut b = good.clone();
        b[16 + 14] = 1; // second key := 1, equal to the first
        assert!(corrupt_what(&refix(b), 256).contains("increasing"));
        let mut b = good.clone();
        b[255] = 1;
        assert!(corrupt_what(&refix(b), 256).contains("after its items"));
        assert!(matches!(
            Node::decode(&good, 100),
            Err(Error::InvalidArgument { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes never panic, and whatever decodes re-encodes
        /// identically.
        #[test]
        fn random_blocks_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), fix_header in any::<bool>()) {
            let mut b = bytes;
            if fix_header && b.len() >= 16 {
                b[..2].copy_from_slice(&NODE_MAGIC.to_le_bytes());
                let crc = block_crc(&b);
                b[8..12].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(n) = Node::decode(&b, b.len().max(Node::MIN_BLOCK_BYTES)) {
                prop_assert_eq!(n.encode(b.len()), b);
            }
        }

        /// Setting an item in a leaf's bytes gives what encoding the
        /// changed leaf gives, and declines exactly a split or a new first key.
        #[test]
        fn leaf_item_set_in_bytes_encodes_alike(
            sizes in proptest::collection::vec(0usize..=40, 1..12),
            key in 0u64..40,
            len in 0usize..=60,
        ) {
            let items: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| (i as u64 * 3 + 1, n)).collect();
            let bb = 256;
            let node = leaf(&items);
            prop_assume!(node.fits(bb));
            let block = node.encode(bb);
            let value = vec![0xc3; len];
            let got = NodeRef::parse(&block, bb).unwrap().with_leaf_item(key, &value, bb);
            let Node::Leaf { items: mut changed } = node else { unreachable!() };
            let new_first = match changed.binary_search_by_key(&key, |(k, _)| *k) {
                Ok(i) => { changed[i].1 = Value::from_slice(&value); false }
                Err(i) => { changed.insert(i, (key, Value::from_slice(&value))); i == 0 }
            };
            let changed = Node::Leaf { items: changed };
            if new_first || !changed.fits(bb) {
                prop_assert!(got.is_none());
            } else {
                prop_assert_eq!(got, Some(changed.encode(bb)));
            }
        }

        /// Setting a child pointer in an internal node's bytes gives what
        /// encoding the changed node gives.
        #[test]
        fn child_set_in_bytes_encodes_alike(n in 1usize..15, i in 0usize..15, ptr in 1u64..u64::MAX) {
            let i = i % n;
            let children: Vec<_> = (0..n as u64).map(|c| (c * 2, c + 100)).collect();
            let mut node = Node::Internal { level: 1, children };
            let mut block = node.encode(256);
            Node::set_child_in_block(&mut block, i, ptr);
            let Node::Internal { children, .. } = &mut node else { unreachable!() };
            children[i].1 = ptr;
            prop_assert_eq!(block, node.encode(256));
        }

        /// Truncated, bit-flipped and crc-refreshed mutations of valid blocks
        /// never panic; a flip without a crc refresh is always caught.
        #[test]
        fn mutated_blocks_never_panic(
            sizes in proptest::collection::vec(0usize..=20, 1..8),
            level in 0u8..3,
            flip in 0usize..(256 * 8),
            cut in 0usize..=256,
        ) {
            let node = if level == 0 {
                let items: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| (i as u64 * 3, n)).collect();
                leaf(&items)
            } else {
                Node::Internal { level, children: sizes.iter().enumerate().map(|(i, &n)| (i as u64, n as u64 + 1)).collect() }
            };
            let good = node.encode(256);
            let mut b = good.clone();
            b[flip / 8] ^= 1 << (flip % 8);
            let caught = matches!(Node::decode(&b, 256), Err(Error::Corrupt { .. }));
            prop_assert!(caught, "bit flip {} not caught", flip);
            let crc = block_crc(&b);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
            let _ = Node::decode(&b, 256);
            prop_assert!(item_parses_agree(&b, 256));
            let _ = Node::decode(&good[..cut], 256);
            let _ = Node::decode(&b[..cut], cut.max(Node::MIN_BLOCK_BYTES));
        }
    }
}
