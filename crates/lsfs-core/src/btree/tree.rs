//! Stateless copy-on-write B-tree operations over a root pointer.
//!
//! Invariants (all checked by [`BTree::check`]):
//! * root `0` is the empty tree; no stored node is empty;
//! * keys strictly increase within a node and across the tree;
//! * an internal item's key is the *exact* minimum key of its child's
//!   subtree, so `floor` and `get` need a single descent, and a child's
//!   level is its parent's minus one;
//! * a root internal node has at least two children.
//!
//! Deletions are lazy, as in many production B-trees: underfull nodes are not
//! merged or rebalanced; only nodes that become empty are freed and unlinked.
//! The tree stays valid and sorted, just possibly sparser than necessary.
//!
//! Every modification first reads and validates the whole root-to-leaf path,
//! then makes it writable top-down (recording copied pointers in the parent or
//! `*root`), then writes it bottom-up. Corruption and argument errors are thus
//! reported before anything changes; a store error during the write phase may
//! leave the modification half done, which callers treat as fatal (the mount
//! goes read-only) exactly like any other device error.

mod split;

use std::collections::HashSet;

use crate::btree::node::{NodeRef, Value};
use crate::btree::{Node, NodeStore};
use crate::error::{Error, Result};

/// B-tree operations for one node block size. Holds no tree state: the
/// caller keeps the root pointer and passes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BTree {
    block_bytes: usize,
}

/// One node seen by [`BTree::visit`].
#[derive(Debug)]
pub struct NodeVisit<'a> {
    pub ptr: u64,
    /// The parent's pointer, 0 for the root.
    pub parent: u64,
    pub level: u8,
    /// The decoded node: leaf items or internal children.
    pub node: &'a Node,
}

impl NodeVisit<'_> {
    /// The `(key, value)` items if this is a leaf.
    pub fn items(&self) -> Option<&[(u64, Value)]> {
        match self.node {
            Node::Leaf { items } => Some(items),
            Node::Internal { .. } => None,
        }
    }
}

/// What a parent implies about a child's keys: its exact first key and the
/// exclusive end of its range (`None` for the root and the right edge).
type Bounds = (Option<u64>, Option<u64>);

/// One node of a root-to-leaf path, and (internal nodes) the child taken.
struct Step {
    ptr: u64,
    node: Node,
    idx: usize,
    /// Whether `node` differs from the block at `ptr`, so must be written.
    dirty: bool,
}

impl Default for BTree {
    fn default() -> Self {
        BTree {
            block_bytes: Node::DEFAULT_BLOCK_BYTES,
        }
    }
}

impl BTree {
    /// Operations on trees whose nodes are `block_bytes` long.
    pub fn new(block_bytes: usize) -> Result<BTree> {
        Node::check_block_bytes(block_bytes)?;
        Ok(BTree { block_bytes })
    }

    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// Largest value this tree accepts (see [`Node::max_value_bytes`]).
    pub fn max_value_bytes(&self) -> usize {
        Node::max_value_bytes(self.block_bytes)
    }

    /// The value stored under `key`. Reads exactly one node per level, fewer
    /// if `key` is below the tree's minimum.
    pub fn get<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
    ) -> Result<Option<Vec<u8>>> {
        if root == 0 {
            return Ok(None);
        }
        let (mut ptr, mut level) = (root, None);
        loop {
            let block = store.read_node(ptr)?;
            let n = self.parse(store, &block, ptr, level)?;
            let i = n.floor_index(key);
            if n.level() == 0 {
                return Ok(i.filter(|&i| n.key(i) == key).map(|i| n.value(i).to_vec()));
            }
            match i {
                Some(i) => (ptr, level) = (n.child(i), Some(n.level() - 1)),
                None => return Ok(None),
            }
        }
    }

    /// The item with the greatest key `<= key`. One descent: exact parent
    /// minimum keys guarantee the chosen child holds the answer.
    pub fn floor<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        if root == 0 {
            return Ok(None);
        }
        let (mut ptr, mut level) = (root, None);
        loop {
            let block = store.read_node(ptr)?;
            let n = self.parse(store, &block, ptr, level)?;
            let Some(i) = n.floor_index(key) else {
                // Below the tree's minimum; below a non-root's minimum means
                // the parent's key lied.
                return match level {
                    None => Ok(None),
                    Some(_) => Err(self.bad_min(ptr)),
                };
            };
            if n.level() == 0 {
                return Ok(Some((n.key(i), n.value(i).to_vec())));
            }
            (ptr, level) = (n.child(i), Some(n.level() - 1));
        }
    }

    /// The item with the smallest key `>= key`. Reads at most
    /// `2 * height - 1` nodes: when the leaf reached holds only smaller keys,
    /// the answer is the first item of the nearest subtree to the right.
    pub fn ceil<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.ceil_run(store, root, key, 1)?.pop())
    }

    /// Up to `max` items with keys `>= key`, in key order, from the one leaf
    /// that holds the first of them: a scan takes one descent per leaf, not
    /// one per item (readdir listed a directory with a descent per entry).
    /// Fewer than `max` does not mean the end; empty does.
    pub fn ceil_run<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
        max: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        if root == 0 || max == 0 {
            return Ok(Vec::new());
        }
        let (mut ptr, mut level) = (root, None);
        let mut right = None; // nearest subtree right of the path: (ptr, level)
        let mut first = true;
        loop {
            let block = store.read_node(ptr)?;
            let n = self.parse(store, &block, ptr, level)?;
            if n.level() == 0 {
                // On the path to `key`, start at its place; in the subtree
                // to the right, at the leftmost leaf's first item.
                let from = if first { n.ceil_index(key) } else { 0 };
                if from < n.len() || right.is_none() {
                    return Ok((from..n.len().min(from.saturating_add(max)))
                        .map(|i| (n.key(i), n.value(i).to_vec()))
                        .collect());
                }
                (ptr, level) = right.take().map(|(p, l)| (p, Some(l))).unwrap();
                first = false;
                continue;
            }
            let l = n.level();
            let i = if first {
                let i = n.floor_index(key).unwrap_or(0);
                if i + 1 < n.len() {
                    right = Some((n.child(i + 1), l - 1));
                }
                i
            } else {
                0
            };
            (ptr, level) = (n.child(i), Some(l - 1));
        }
    }

    /// Inserts `key` or replaces its value; returns the old value. Storing the
    /// value already there changes nothing (no node is copied).
    pub fn insert<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        key: u64,
        value: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        self.check_value(value)?;
        if *root == 0 {
            let leaf = Node::Leaf {
                items: vec![(key, Value::from_slice(value))],
            };
            *root = self.write_new(store, &leaf)?;
            return Ok(None);
        }
        if let Some(old) = self.insert_in_place(store, root, key, value)? {
            return Ok(old);
        }
        let mut path = self
            .descend(store, *root, key, true)?
            .expect("insert descent always reaches a leaf");
        let leaf = path.last_mut().unwrap();
        leaf.dirty = true;
        let Node::Leaf { items } = &mut leaf.node else {
            unreachable!()
        };
        let (old, appending) = match items.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) if items[i].1.as_slice() == value => return Ok(Some(value.to_vec())),
            Ok(i) => (
                Some(std::mem::replace(&mut items[i].1, Value::from_slice(value)).into_vec()),
                false,
            ),
            Err(i) => {
                items.insert(i, (key, Value::from_slice(value)));
                (None, i + 1 == items.len() && is_rightmost(&path))
            }
        };
        self.make_writable(store, root, &mut path)?;
        self.write_path(store, root, path, appending)?;
        Ok(old)
    }

    /// [`BTree::insert`] in the common case, where it changes one leaf's
    /// item and no key of a parent: the key is not the leaf's new first
    /// one, the leaf still fits, and every parent key on the path is its
    /// child's first key (as the general path would leave it). The leaf's
    /// bytes are edited instead of decoded and encoded item by item, and a
    /// parent's only where copy-on-write moved its child. The same store
    /// calls in the same order, and the same bytes, as the general path:
    /// that decoding was a third of a random 4 KiB overwrite's
    /// instructions. `None`, with nothing changed, in the other cases.
    fn insert_in_place<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        key: u64,
        value: &[u8],
    ) -> Result<Option<Option<Vec<u8>>>> {
        let mut path = Vec::new();
        let (mut leaf_ptr, leaf, old) =
            match self.in_place_leaf(store, *root, key, value, &mut path)? {
                InPlace::General => return Ok(None),
                InPlace::Unchanged(old) => return Ok(Some(old)),
                InPlace::Leaf { ptr, block, old } => (ptr, block, old),
            };
        let moved = in_place_make_writable(store, root, &mut path, &mut leaf_ptr)?;
        // Bottom-up, as `write_path` does: the leaf, then the parents whose
        // child moved. Both stay well formed, so they count as verified.
        store.write_node(leaf_ptr, leaf)?;
        store.set_node_verified(leaf_ptr);
        for ((ptr, block, _), moved) in path.into_iter().zip(moved).rev() {
            if moved {
                store.write_node(ptr, block)?;
                store.set_node_verified(ptr);
            }
        }
        Ok(Some(old))
    }

    /// The descent of [`BTree::insert_in_place`]: the leaf `key` belongs
    /// in, edited to hold `value`, with the internal nodes above it pushed
    /// on `path`. Stops at the first sign the general path is needed.
    fn in_place_leaf<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
        value: &[u8],
        path: &mut Vec<InPlaceStep>,
    ) -> Result<InPlace> {
        let (mut ptr, mut level, mut parent_key) = (root, None, None);
        loop {
            let block = store.read_node(ptr)?;
            let n = self.parse(store, &block, ptr, level)?;
            if parent_key.is_some_and(|k| k != n.key(0)) {
                return Ok(InPlace::General);
            }
            if n.level() == 0 {
                let i = n.ceil_index(key);
                let old = (i < n.len() && n.key(i) == key).then(|| n.value(i).to_vec());
                if old.as_deref() == Some(value) {
                    return Ok(InPlace::Unchanged(old));
                }
                return Ok(match n.with_leaf_item(key, value, self.block_bytes) {
                    Some(block) => InPlace::Leaf { ptr, block, old },
                    None => InPlace::General,
                });
            }
            // Below the node's first key: the general path changes the
            // first keys on the way down.
            let Some(i) = n.floor_index(key) else {
                return Ok(InPlace::General);
            };
            let next = (n.child(i), Some(n.level() - 1));
            parent_key = Some(n.key(i));
            path.push((ptr, block, i));
            (ptr, level) = next;
        }
    }

    /// Removes `key`; returns its value. Nodes left empty are freed and
    /// unlinked; a root left with one child collapses into it. Removing an
    /// absent key changes nothing.
    pub fn remove<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        key: u64,
    ) -> Result<Option<Vec<u8>>> {
        if *root == 0 {
            return Ok(None);
        }
        let Some(mut path) = self.descend(store, *root, key, false)? else {
            return Ok(None);
        };
        let Node::Leaf { items } = &path.last().unwrap().node else {
            unreachable!()
        };
        let Ok(pos) = items.binary_search_by_key(&key, |(k, _)| *k) else {
            return Ok(None);
        };
        // The bottom nodes with a single item (leaf) or child (internal) on
        // the path become empty: free their old pointers without copying.
        let emptied = path.iter().rev().take_while(|s| s.node.len() == 1).count();
        let survivors = path.len() - emptied;
        let old = remove_leaf_item(&mut path.last_mut().unwrap().node, pos);
        for step in path.drain(survivors..) {
            store.free_node(step.ptr)?;
        }
        if survivors == 0 {
            *root = 0;
            return Ok(Some(old));
        }
        if survivors == 1 && emptied > 0 && path[0].node.len() == 2 {
            // The root loses one of its two children: the other becomes root.
            let Node::Internal { children, .. } = &path[0].node else {
                unreachable!()
            };
            store.free_node(path[0].ptr)?;
            *root = children[1 - path[0].idx].1;
            self.collapse_root(store, root)?;
            return Ok(Some(old));
        }
        let bottom = path.last_mut().unwrap();
        bottom.dirty = true;
        if let (true, Node::Internal { children, .. }) = (emptied > 0, &mut bottom.node) {
            children.remove(bottom.idx);
        }
        self.make_writable(store, root, &mut path)?;
        self.write_path(store, root, path, false)?;
        Ok(Some(old))
    }

    /// Calls `f` on every node, parents before children, left to right.
    /// Validates each node and the levels, and refuses a node reachable
    /// twice, so a corrupt image cannot make the walk loop or explode.
    pub fn visit<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        f: &mut dyn FnMut(NodeVisit<'_>) -> Result<()>,
    ) -> Result<()> {
        self.walk(store, root, &mut |ptr, parent, node, _| {
            f(NodeVisit {
                ptr,
                parent,
                level: node.level(),
                node,
            })
        })
    }

    /// Full structural check: every node decodes, levels step down by one,
    /// keys increase across the whole tree, every parent key is its child's
    /// exact minimum, a root internal node has two or more children, and no
    /// node is reachable twice. Errors name the offending pointer.
    pub fn check<S: NodeStore + ?Sized>(&self, store: &mut S, root: u64) -> Result<()> {
        self.walk(store, root, &mut |ptr, parent, node, bounds| {
            let (min, end) = bounds;
            if parent == 0 && !node.is_leaf() && node.len() < 2 {
                return Err(Error::corrupt(format!(
                    "B-tree root {ptr} is internal with one child"
                )));
            }
            let first = node.first_key().unwrap();
            if min.is_some_and(|m| m != first) {
                return Err(Error::corrupt(format!(
                    "B-tree node {ptr}: first key {first} but parent {parent} says {}",
                    min.unwrap()
                )));
            }
            let last = node.key_at(node.len() - 1).unwrap();
            if end.is_some_and(|e| last >= e) {
                return Err(Error::corrupt(format!(
                    "B-tree node {ptr}: key {last} not below the next key {} of parent {parent}",
                    end.unwrap()
                )));
            }
            Ok(())
        })
    }

    /// Depth-first walk with an explicit stack. For each node, `f` also gets
    /// the bounds its parent implies: (exact first key, exclusive key end).
    fn walk<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        f: &mut dyn FnMut(u64, u64, &Node, Bounds) -> Result<()>,
    ) -> Result<()> {
        if root == 0 {
            return Ok(());
        }
        let mut seen = HashSet::new();
        let mut stack = vec![(root, 0u64, None, (None, None))];
        while let Some((ptr, parent, level, bounds)) = stack.pop() {
            if !seen.insert(ptr) {
                return Err(Error::corrupt(format!(
                    "B-tree node {ptr} is reachable twice (again from {parent})"
                )));
            }
            let node = self.read(store, ptr, level)?;
            f(ptr, parent, &node, bounds)?;
            if let Node::Internal { level, children } = &node {
                for (i, &(key, child)) in children.iter().enumerate().rev() {
                    let end = children.get(i + 1).map(|c| c.0).or(bounds.1);
                    stack.push((child, ptr, Some(level - 1), (Some(key), end)));
                }
            }
        }
        Ok(())
    }

    /// Reads and decodes `ptr`, checking its level if the parent implies one.
    fn read<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        ptr: u64,
        level: Option<u8>,
    ) -> Result<Node> {
        let block = store.read_node(ptr)?;
        Ok(self.parse(store, &block, ptr, level)?.to_node())
    }

    /// Validates the node block read from `ptr` without copying its items
    /// (lookups), checking its level if the parent implies one. Bytes the
    /// store has seen pass before get the cheaper check; bytes that pass
    /// the full one are remembered.
    fn parse<'b, S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        block: &'b [u8],
        ptr: u64,
        level: Option<u8>,
    ) -> Result<NodeRef<'b>> {
        let verified = store.node_verified(ptr);
        let n =
            NodeRef::parse_checked(block, self.block_bytes, !verified).map_err(|e| match e {
                Error::Corrupt { what } => Error::corrupt(format!("B-tree node {ptr}: {what}")),
                other => other,
            })?;
        if !verified {
            store.set_node_verified(ptr);
        }
        match level {
            Some(l) if n.level() != l => Err(Error::corrupt(format!(
                "B-tree node {ptr} has level {}, its parent implies {l}",
                n.level()
            ))),
            _ => Ok(n),
        }
    }

    /// The root-to-leaf path towards `key`. For an insert, keys below a
    /// node's minimum go to its first child; otherwise such a key is absent
    /// and the result is `None`.
    fn descend<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: u64,
        key: u64,
        for_insert: bool,
    ) -> Result<Option<Vec<Step>>> {
        let mut path: Vec<Step> = Vec::new();
        let (mut ptr, mut level) = (root, None);
        loop {
            let node = self.read(store, ptr, level)?;
            let Node::Internal { level: l, children } = &node else {
                path.push(Step {
                    ptr,
                    node,
                    idx: 0,
                    dirty: false,
                });
                return Ok(Some(path));
            };
            let idx = match child_for(children, key) {
                Some(i) => i,
                None if for_insert => 0,
                None => return Ok(None),
            };
            let next = (children[idx].1, Some(l - 1));
            path.push(Step {
                ptr,
                node,
                idx,
                dirty: false,
            });
            (ptr, level) = next;
        }
    }

    /// Makes every node of `path` writable, top-down, recording each new
    /// pointer in the (already writable, in-memory) parent or in `*root`.
    fn make_writable<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        path: &mut [Step],
    ) -> Result<()> {
        for i in 0..path.len() {
            let new = store.make_writable(path[i].ptr)?;
            if new == path[i].ptr {
                continue;
            }
            path[i].ptr = new;
            match i.checked_sub(1) {
                None => *root = new,
                Some(p) => set_child(&mut path[p], |c| c.1 = new),
            }
        }
        Ok(())
    }

    /// Writes the changed nodes of a writable path bottom-up: splits
    /// overflowing nodes (a new sibling goes into the parent, a root split
    /// grows a new root) and keeps each parent key equal to its child's
    /// minimum. Unchanged ancestors are not rewritten.
    fn write_path<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        mut path: Vec<Step>,
        appending: bool,
    ) -> Result<()> {
        let mut sibling = None;
        while let Some(mut step) = path.pop() {
            if let (Some(s), Node::Internal { children, .. }) = (sibling.take(), &mut step.node) {
                children.insert(step.idx + 1, s);
                step.dirty = true;
            }
            if !step.dirty {
                continue;
            }
            let right = self.split(&mut step.node, appending);
            self.put(store, step.ptr, &step.node)?;
            if let Some(right) = right {
                sibling = Some((right.first_key().unwrap(), self.write_new(store, &right)?));
            }
            let min = step.node.first_key().unwrap();
            match path.last_mut() {
                Some(parent) if parent.node.key_at(parent.idx) != Some(min) => {
                    set_child(parent, |c| c.0 = min)
                }
                Some(_) => {}
                None => {
                    if let Some(s) = sibling.take() {
                        let level = step.node.level() + 1;
                        let new_root = Node::Internal {
                            level,
                            children: vec![(min, step.ptr), s],
                        };
                        *root = self.write_new(store, &new_root)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// If `node` is too big, moves its upper part into a returned new right
    /// sibling. Leaves split by encoded size, internal nodes by count; both
    /// halves are balanced, except that appends at the tree's right edge
    /// leave the left node full, so sequential inserts pack nodes densely.
    fn split(&self, node: &mut Node, appending: bool) -> Option<Node> {
        if node.fits(self.block_bytes) {
            return None;
        }
        // For internal nodes, fitting is the count limit.
        let max_children = Node::max_children(self.block_bytes);
        Some(match node {
            Node::Leaf { items } => {
                let at = leaf_split_point(items, self.block_bytes, appending);
                Node::Leaf {
                    items: items.split_off(at),
                }
            }
            Node::Internal { level, children } => {
                let at = if appending {
                    max_children
                } else {
                    children.len() / 2
                };
                Node::Internal {
                    level: *level,
                    children: children.split_off(at),
                }
            }
        })
    }

    /// After a removal, a root internal node with one child is replaced by
    /// that child, repeatedly (lazy deletion can leave one-child nodes).
    fn collapse_root<S: NodeStore + ?Sized>(&self, store: &mut S, root: &mut u64) -> Result<()> {
        loop {
            match self.read(store, *root, None)? {
                Node::Internal { children, .. } if children.len() == 1 => {
                    store.free_node(*root)?;
                    *root = children[0].1;
                }
                _ => return Ok(()),
            }
        }
    }

    fn write_new<S: NodeStore + ?Sized>(&self, store: &mut S, node: &Node) -> Result<u64> {
        let ptr = store.alloc_node()?;
        self.put(store, ptr, node)?;
        Ok(ptr)
    }

    /// Write `node` at `ptr`. A well-formed node's encoding passes the full
    /// check by construction (checked in debug builds), so the store may
    /// skip it; one that is not (written while changing a damaged tree) is
    /// left for the next read to refuse.
    fn put<S: NodeStore + ?Sized>(&self, store: &mut S, ptr: u64, node: &Node) -> Result<()> {
        let block = node.encode(self.block_bytes);
        let well_formed = node.is_well_formed();
        debug_assert_eq!(
            NodeRef::parse(&block, self.block_bytes).is_ok(),
            well_formed,
            "Node::is_well_formed disagrees with NodeRef::parse"
        );
        store.write_node(ptr, block)?;
        if well_formed {
            store.set_node_verified(ptr);
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        let max = self.max_value_bytes();
        if value.len() > max {
            return Err(Error::invalid(format!(
                "B-tree value of {} bytes, limit {max}",
                value.len()
            )));
        }
        Ok(())
    }

    fn bad_min(&self, ptr: u64) -> Error {
        Error::corrupt(format!(
            "B-tree node {ptr}: first key above its parent's key for it"
        ))
    }
}

/// Index of the child whose subtree would hold `key`: the last one whose
/// minimum is `<= key`; `None` if `key` is below them all.
fn child_for(children: &[(u64, u64)], key: u64) -> Option<usize> {
    children.partition_point(|(k, _)| *k <= key).checked_sub(1)
}

/// An internal node on the path of [`BTree::insert_in_place`]: pointer,
/// block, child taken.
type InPlaceStep = (u64, Vec<u8>, usize);

/// Where the descent of [`BTree::insert_in_place`] ends.
enum InPlace {
    /// The general path must run; nothing was changed.
    General,
    /// The key holds the value already: nothing to write. Carries the old
    /// value to return.
    Unchanged(Option<Vec<u8>>),
    /// The leaf at `ptr` becomes `block`; `old` is the value replaced.
    Leaf {
        ptr: u64,
        block: Vec<u8>,
        old: Option<Vec<u8>>,
    },
}

/// Copy on write for [`BTree::insert_in_place`], top-down, as
/// `make_writable` does: each node of `path` and the leaf at `leaf_ptr`
/// made writable, a moved child's new pointer set in its parent's block
/// (or in `root`). Returns which parents' blocks changed that way.
fn in_place_make_writable<S: NodeStore + ?Sized>(
    store: &mut S,
    root: &mut u64,
    path: &mut [InPlaceStep],
    leaf_ptr: &mut u64,
) -> Result<Vec<bool>> {
    let mut moved = vec![false; path.len()];
    for i in 0..=path.len() {
        let at = path.get(i).map_or(*leaf_ptr, |p| p.0);
        let new = store.make_writable(at)?;
        if new == at {
            continue;
        }
        match path.get_mut(i) {
            Some(p) => p.0 = new,
            None => *leaf_ptr = new,
        }
        match i.checked_sub(1) {
            None => *root = new,
            Some(parent) => {
                let (_, block, idx) = &mut path[parent];
                Node::set_child_in_block(block, *idx, new);
                moved[parent] = true;
            }
        }
    }
    Ok(moved)
}

/// Whether every step of `path` took its node's last child.
fn is_rightmost(path: &[Step]) -> bool {
    path.iter()
        .all(|s| s.node.is_leaf() || s.idx + 1 == s.node.len())
}

/// Changes the item of `parent` for the child on the path, marking it dirty.
fn set_child(parent: &mut Step, f: impl FnOnce(&mut (u64, u64))) {
    let Node::Internal { children, .. } = &mut parent.node else {
        unreachable!("a parent is internal")
    };
    f(&mut children[parent.idx]);
    parent.dirty = true;
}

fn remove_leaf_item(node: &mut Node, pos: usize) -> Vec<u8> {
    let Node::Leaf { items } = node else {
        unreachable!()
    };
    items.remove(pos).1.into_vec()
}

/// Where to split an overflowing leaf: the first index of the right half.
///
/// Both halves fit: the items total at most one node plus one item, and no
/// item exceeds half a node ([`Node::max_value_bytes`]). The largest prefix
/// that fits then leaves less than half a node plus one item on the right,
/// and the balanced choice (minimising the larger half) is never worse.
fn leaf_split_point(items: &[(u64, Value)], block_bytes: usize, appending: bool) -> usize {
    let cap = block_bytes - Node::HEADER_BYTES;
    let sizes: Vec<usize> = items
        .iter()
        .map(|(_, v)| Node::leaf_item_bytes(v.len()))
        .collect();
    let total: usize = sizes.iter().sum();
    let mut best = (usize::MAX, 1);
    let mut left = 0;
    for (at, size) in sizes.iter().enumerate().take(items.len() - 1) {
        left += size;
        let larger = left.max(total - left);
        if appending && left <= cap {
            best = (larger, at + 1); // keep the largest fitting prefix
        } else if !appending && larger < best.0 {
            best = (larger, at + 1);
        }
    }
    best.1
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
