//! Cutting a tree in two at a key, touching only the nodes on that key's
//! path: what a file truncated to a non-zero size needs to hand its tail's
//! map to the background deleter without visiting every extent.

use super::{BTree, Step};
use crate::btree::{Node, NodeStore};
use crate::error::Result;

/// One side of a cut node: the pointer it is written at and its first key.
type Side = Option<(u64, u64)>;

impl BTree {
    /// Moves every item with a key `>= key` out of the tree at `*root`
    /// into a tree of its own and returns that tree's root (0 if none
    /// moved); `*root` keeps the items below `key` (0 if none is left).
    ///
    /// Only the nodes on `key`'s root-to-leaf path change: each is cut in
    /// two, the left part copied on write where it was, the right part
    /// written as a new node (or freed, where a part is empty). Both trees
    /// keep every invariant [`BTree::check`] checks; as after a lazy
    /// removal, the cut nodes may be underfull, and a root left with one
    /// child collapses into it.
    pub fn split_off<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        root: &mut u64,
        key: u64,
    ) -> Result<u64> {
        if *root == 0 {
            return Ok(0);
        }
        // A key at or below the first one moves everything; otherwise the
        // floor descent below finds the one leaf the cut crosses.
        let Some(path) = self.descend(store, *root, key, false)? else {
            return Ok(std::mem::take(root));
        };
        let (mut left, mut right): (Side, Side) = (None, None);
        for step in path.into_iter().rev() {
            (left, right) = self.cut_node(store, step, key, left, right)?;
        }
        *root = left.map_or(0, |(ptr, _)| ptr);
        let mut right_root = right.map_or(0, |(ptr, _)| ptr);
        if *root != 0 {
            self.collapse_root(store, root)?;
        }
        if right_root != 0 {
            self.collapse_root(store, &mut right_root)?;
        }
        Ok(right_root)
    }

    /// Cut one node of the path at `key`, given its cut child's two sides
    /// (internal nodes), and write both parts.
    fn cut_node<S: NodeStore + ?Sized>(
        &self,
        store: &mut S,
        step: Step,
        key: u64,
        child_left: Side,
        child_right: Side,
    ) -> Result<(Side, Side)> {
        let (l, r) = match step.node {
            Node::Leaf { mut items } => {
                let pos = items.partition_point(|(k, _)| *k < key);
                let r = items.split_off(pos);
                (Node::Leaf { items }, Node::Leaf { items: r })
            }
            Node::Internal {
                level,
                mut children,
            } => {
                let mut r: Vec<(u64, u64)> = child_right.into_iter().map(|(p, k)| (k, p)).collect();
                r.extend_from_slice(&children[step.idx + 1..]);
                children.truncate(step.idx);
                // The cut child's left part starts where the child did.
                children.extend(child_left.map(|(p, k)| (k, p)));
                (
                    Node::Internal { level, children },
                    Node::Internal { level, children: r },
                )
            }
        };
        let left = match l.first_key() {
            Some(first) => {
                let ptr = store.make_writable(step.ptr)?;
                self.put(store, ptr, &l)?;
                Some((ptr, first))
            }
            None => {
                store.free_node(step.ptr)?;
                None
            }
        };
        let right = match r.first_key() {
            Some(first) => Some((self.write_new(store, &r)?, first)),
            None => None,
        };
        Ok((left, right))
    }
}
