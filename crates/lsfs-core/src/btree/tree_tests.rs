//! Tests for [`BTree`] over an in-memory store that models copy-on-write
//! checkpoints exactly, checked against a `BTreeMap` model.

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::btree::MAX_VALUE_BYTES;

/// A `NodeStore` with checkpoint epochs. Nodes born in the current epoch are
/// writable; `make_writable` on an older node copies it and releases the
/// original, whose bytes stay readable for older snapshots. Freeing a node
/// born in this epoch deletes it, so any later read of it fails. Misuse (a
/// write to a non-writable node, a double free) panics, failing the test.
struct MemStore {
    block_bytes: usize,
    epoch: u64,
    next_ptr: u64,
    blocks: HashMap<u64, Vec<u8>>,
    born: HashMap<u64, u64>,
    released: HashSet<u64>,
    reads: u64,
    /// Nodes whose bytes passed the full check (as the block cache keeps it).
    verified: HashSet<u64>,
}

impl MemStore {
    fn new(block_bytes: usize) -> MemStore {
        MemStore {
            block_bytes,
            epoch: 0,
            next_ptr: 1,
            blocks: HashMap::new(),
            born: HashMap::new(),
            released: HashSet::new(),
            reads: 0,
            verified: HashSet::new(),
        }
    }

    /// New bytes for `ptr` from outside the tree (a damaged device block):
    /// as with the block cache, whatever was verified before no longer is.
    fn replace(&mut self, ptr: u64, block: Vec<u8>) {
        self.verified.remove(&ptr);
        self.blocks.insert(ptr, block);
    }

    /// A checkpoint: everything written so far becomes read-only.
    fn checkpoint(&mut self) {
        self.epoch += 1;
    }

    fn writable(&self, ptr: u64) -> bool {
        self.born.get(&ptr) == Some(&self.epoch) && !self.released.contains(&ptr)
    }

    /// Pointers allocated and not released: must be exactly the live tree.
    fn live(&self) -> HashSet<u64> {
        self.born
            .keys()
            .copied()
            .filter(|p| !self.released.contains(p))
            .collect()
    }
}

impl NodeStore for MemStore {
    fn read_node(&mut self, ptr: u64) -> Result<Vec<u8>> {
        self.reads += 1;
        self.blocks
            .get(&ptr)
            .cloned()
            .ok_or_else(|| Error::corrupt(format!("test store: no node {ptr}")))
    }

    fn make_writable(&mut self, ptr: u64) -> Result<u64> {
        assert!(
            !self.released.contains(&ptr),
            "make_writable of released node {ptr}"
        );
        assert!(
            self.blocks.contains_key(&ptr),
            "make_writable of unwritten node {ptr}"
        );
        if self.writable(ptr) {
            return Ok(ptr);
        }
        let new = self.alloc_node()?;
        let copy = self.blocks[&ptr].clone();
        self.blocks.insert(new, copy);
        self.released.insert(ptr);
        Ok(new)
    }

    fn write_node(&mut self, ptr: u64, block: Vec<u8>) -> Result<()> {
        assert!(self.writable(ptr), "write to non-writable node {ptr}");
        assert_eq!(block.len(), self.block_bytes);
        self.verified.remove(&ptr);
        self.blocks.insert(ptr, block);
        Ok(())
    }

    fn alloc_node(&mut self) -> Result<u64> {
        let ptr = self.next_ptr;
        self.next_ptr += 1;
        self.born.insert(ptr, self.epoch);
        Ok(ptr)
    }

    fn free_node(&mut self, ptr: u64) -> Result<()> {
        assert!(self.born.contains_key(&ptr), "free of unknown node {ptr}");
        assert!(self.released.insert(ptr), "node {ptr} freed twice");
        if self.born[&ptr] == self.epoch {
            self.blocks.remove(&ptr);
            self.verified.remove(&ptr);
        }
        Ok(())
    }

    fn node_verified(&self, ptr: u64) -> bool {
        self.verified.contains(&ptr)
    }

    fn set_node_verified(&mut self, ptr: u64) {
        assert!(
            self.blocks.contains_key(&ptr),
            "verified a node never written: {ptr}"
        );
        self.verified.insert(ptr);
    }
}

/// A tree, its store, its model, and snapshots taken at checkpoints.
struct Harness {
    t: BTree,
    s: MemStore,
    root: u64,
    model: BTreeMap<u64, Vec<u8>>,
    snapshots: Vec<(u64, BTreeMap<u64, Vec<u8>>)>,
}

impl Harness {
    fn new(block_bytes: usize) -> Harness {
        Harness {
            t: BTree::new(block_bytes).unwrap(),
            s: MemStore::new(block_bytes),
            root: 0,
            model: BTreeMap::new(),
            snapshots: Vec::new(),
        }
    }

    fn insert(&mut self, key: u64, value: Vec<u8>) {
        let old = self
            .t
            .insert(&mut self.s, &mut self.root, key, &value)
            .unwrap();
        assert_eq!(old, self.model.insert(key, value), "insert {key}");
    }

    fn remove(&mut self, key: u64) {
        let old = self.t.remove(&mut self.s, &mut self.root, key).unwrap();
        assert_eq!(old, self.model.remove(&key), "remove {key}");
    }

    fn lookups(&mut self, key: u64) {
        let (t, s, root, m) = (self.t, &mut self.s, self.root, &self.model);
        assert_eq!(
            t.get(s, root, key).unwrap().as_ref(),
            m.get(&key),
            "get {key}"
        );
        let floor = m.range(..=key).next_back().map(|(k, v)| (*k, v.clone()));
        assert_eq!(t.floor(s, root, key).unwrap(), floor, "floor {key}");
        let ceil = m.range(key..).next().map(|(k, v)| (*k, v.clone()));
        assert_eq!(t.ceil(s, root, key).unwrap(), ceil, "ceil {key}");
        // Scanning by runs from `key` yields exactly the model's range, and
        // each run starts where ceil says.
        for max in [1, 7, usize::MAX] {
            let mut got = Vec::new();
            let mut from = key;
            loop {
                let run = t.ceil_run(s, root, from, max).unwrap();
                assert!(run.len() <= max, "run longer than {max}");
                let Some(&(last, _)) = run.last() else {
                    break;
                };
                assert_eq!(
                    run.first().cloned(),
                    t.ceil(s, root, from).unwrap(),
                    "run from {from}"
                );
                got.extend(run);
                match last.checked_add(1) {
                    Some(n) => from = n,
                    None => break,
                }
            }
            let want: Vec<_> = m.range(key..).map(|(k, v)| (*k, v.clone())).collect();
            assert_eq!(got, want, "scan from {key} in runs of {max}");
        }
    }

    /// Structure valid, no node leaked or freed while reachable.
    fn check(&mut self) {
        self.t.check(&mut self.s, self.root).unwrap();
        let mut reachable = HashSet::new();
        self.t
            .visit(&mut self.s, self.root, &mut |v| {
                reachable.insert(v.ptr);
                Ok(())
            })
            .unwrap();
        assert_eq!(
            reachable,
            self.s.live(),
            "live nodes are exactly the reachable ones"
        );
        assert_eq!(self.root == 0, self.model.is_empty());
    }

    fn checkpoint(&mut self) {
        self.s.checkpoint();
        self.snapshots.push((self.root, self.model.clone()));
        if self.snapshots.len() > 4 {
            self.snapshots.remove(0);
        }
    }

    /// Every kept snapshot still reads exactly its contents.
    fn verify_snapshots(&mut self) {
        for (root, model) in &self.snapshots {
            self.t.check(&mut self.s, *root).unwrap();
            assert_eq!(
                &contents(&self.t, &mut self.s, *root),
                model,
                "snapshot at root {root}"
            );
        }
    }

    fn height(&mut self) -> u32 {
        height(&self.t, &mut self.s, self.root)
    }
}

fn contents(t: &BTree, s: &mut MemStore, root: u64) -> BTreeMap<u64, Vec<u8>> {
    let mut all = BTreeMap::new();
    t.visit(s, root, &mut |v| {
        all.extend(
            v.items()
                .unwrap_or(&[])
                .iter()
                .map(|(k, v)| (*k, v.to_vec())),
        );
        Ok(())
    })
    .unwrap();
    all
}

fn height(t: &BTree, s: &mut MemStore, root: u64) -> u32 {
    match root {
        0 => 0,
        _ => {
            Node::decode(&s.read_node(root).unwrap(), t.block_bytes())
                .unwrap()
                .level() as u32
                + 1
        }
    }
}

fn value(key: u64, seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (key as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add(i as u8)
        })
        .collect()
}

/// Deterministic pseudo-random numbers (xorshift), for the larger tests.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.max(1);
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[test]
fn empty_tree() {
    let mut h = Harness::new(4096);
    h.lookups(0);
    h.lookups(u64::MAX);
    h.remove(5);
    h.check();
}

#[test]
fn insert_replace_remove() {
    let mut h = Harness::new(4096);
    h.insert(10, b"ten".to_vec());
    h.insert(5, vec![]);
    h.insert(u64::MAX, b"max".to_vec());
    h.insert(0, b"zero".to_vec());
    h.insert(10, b"TEN".to_vec());
    for k in [0, 1, 5, 9, 10, 11, u64::MAX - 1, u64::MAX] {
        h.lookups(k);
    }
    h.check();
    for k in [10, 10, 0, 5, u64::MAX] {
        h.remove(k);
        h.check();
    }
    assert_eq!(h.root, 0);
    assert!(h.s.live().is_empty());
}

#[test]
fn same_value_insert_copies_nothing() {
    let mut h = Harness::new(256);
    for k in 0..50 {
        h.insert(k, value(k, 0, 20));
    }
    h.checkpoint();
    let root = h.root;
    h.insert(7, value(7, 0, 20));
    assert_eq!(h.root, root);
    assert!(h.s.released.is_empty());
}

#[test]
fn value_limits() {
    let mut h = Harness::new(4096);
    h.insert(1, vec![7; MAX_VALUE_BYTES]);
    let too_long = vec![0; MAX_VALUE_BYTES + 1];
    let err = h.t.insert(&mut h.s, &mut h.root, 2, &too_long).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let small = BTree::new(256).unwrap();
    let mut root = 0;
    let err = small
        .insert(
            &mut h.s,
            &mut root,
            2,
            &vec![0; small.max_value_bytes() + 1],
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert_eq!(root, 0);
    assert!(BTree::new(64).is_err());
    h.check();
}

/// Many big values at 4096 bytes: two per leaf at worst.
#[test]
fn max_values_split_cleanly() {
    let mut h = Harness::new(4096);
    let mut next = rng(7);
    for _ in 0..600 {
        let k = next() % 1000;
        h.insert(k, value(k, 1, MAX_VALUE_BYTES - (next() % 3) as usize));
    }
    h.check();
    assert!(h.height() >= 2);
    for k in 0..1000 {
        h.lookups(k);
    }
}

/// Small blocks: a tree of height >= 4, then removal of everything in random
/// order back to the empty tree, checked at every step.
#[test]
fn deep_tree_grows_and_empties() {
    let mut h = Harness::new(128);
    let mut next = rng(42);
    let max = h.t.max_value_bytes() as u64;
    let mut keys: Vec<u64> = (0..1500).map(|_| next() % 5000).collect();
    for (i, &k) in keys.iter().enumerate() {
        h.insert(k, value(k, i as u8, (next() % (max + 1)) as usize));
        if i % 50 == 0 {
            h.check();
        }
    }
    h.check();
    assert!(h.height() >= 4, "height {}", h.height());
    for k in (0..5100).step_by(7) {
        h.lookups(k);
    }
    keys.sort_unstable();
    keys.dedup();
    while !keys.is_empty() {
        let k = keys.swap_remove((next() % keys.len() as u64) as usize);
        h.remove(k);
        h.check();
    }
    assert_eq!(h.root, 0);
    assert!(h.s.live().is_empty());
}

/// Old roots keep reading their old contents after later modifications.
#[test]
fn snapshots_survive_modification() {
    let mut h = Harness::new(256);
    let mut next = rng(3);
    for round in 0..20u8 {
        for _ in 0..60 {
            let k = next() % 400;
            match next() % 3 {
                0 => h.remove(k),
                _ => h.insert(k, value(k, round, (next() % 60) as usize)),
            }
        }
        h.check();
        h.checkpoint();
        h.verify_snapshots();
    }
    assert!(h.height() >= 3);
}

/// Sequential appends pack leaves full, and lookups read one node per level.
#[test]
fn million_sequential_keys() {
    const N: u64 = 1_000_000;
    let mut h = Harness::new(4096);
    for k in 0..N {
        let old =
            h.t.insert(&mut h.s, &mut h.root, k, &k.to_le_bytes())
                .unwrap();
        assert!(old.is_none());
    }
    h.t.check(&mut h.s, h.root).unwrap();
    let height = h.height() as u64;
    assert_eq!(height, 3);
    let mut leaves = 0;
    h.t.visit(&mut h.s, h.root, &mut |v| {
        leaves += v.node.is_leaf() as u64;
        Ok(())
    })
    .unwrap();
    assert!(
        leaves <= N / 200,
        "{leaves} leaves: appends should fill them"
    );
    let (t, s, root) = (h.t, &mut h.s, h.root);
    for k in (0..N).step_by(997).chain([N - 1, N, u64::MAX]) {
        let expect = (k < N).then(|| k.to_le_bytes().to_vec());
        s.reads = 0;
        assert_eq!(t.get(s, root, k).unwrap(), expect);
        assert_eq!(s.reads, height, "get {k}");
        s.reads = 0;
        assert_eq!(t.floor(s, root, k).unwrap().unwrap().0, k.min(N - 1));
        assert!(s.reads <= height, "floor {k}");
        s.reads = 0;
        assert_eq!(
            t.ceil(s, root, k).unwrap().map(|(k, _)| k),
            (k < N).then_some(k)
        );
        assert!(s.reads < 2 * height, "ceil {k}");
    }
}

#[test]
fn check_names_the_bad_node() {
    let t = BTree::new(256).unwrap();
    let mut s = MemStore::new(256);
    let leaf = |s: &mut MemStore, keys: &[u64]| {
        let node = Node::Leaf {
            items: keys.iter().map(|&k| (k, Value::new())).collect(),
        };
        let p = s.alloc_node().unwrap();
        s.write_node(p, node.encode(256)).unwrap();
        p
    };
    let internal = |s: &mut MemStore, level: u8, children: Vec<(u64, u64)>| {
        let p = s.alloc_node().unwrap();
        s.write_node(p, Node::Internal { level, children }.encode(256))
            .unwrap();
        p
    };
    let expect_corrupt = |s: &mut MemStore, root: u64, needle: String| {
        let err = t.check(s, root).unwrap_err();
        assert!(err.to_string().contains(&needle), "{err} lacks {needle}");
        let mut visits = 0;
        let _ = t.visit(s, root, &mut |_| {
            visits += 1;
            Ok(())
        });
        assert!(visits < 10);
    };
    let (a, b) = (leaf(&mut s, &[1, 2]), leaf(&mut s, &[5, 6]));
    let good = internal(&mut s, 1, vec![(1, a), (5, b)]);
    t.check(&mut s, good).unwrap();
    let r = internal(&mut s, 1, vec![(0, a), (5, b)]);
    expect_corrupt(
        &mut s,
        r,
        format!("node {a}: first key 1 but parent {r} says 0"),
    );
    let r = internal(&mut s, 1, vec![(1, a), (2, b)]);
    expect_corrupt(
        &mut s,
        r,
        format!("node {a}: key 2 not below the next key 2 of parent {r}"),
    );
    let r = internal(&mut s, 2, vec![(1, a), (5, b)]);
    expect_corrupt(
        &mut s,
        r,
        format!("node {a} has level 0, its parent implies 1"),
    );
    let r = internal(&mut s, 1, vec![(1, a), (5, a)]);
    expect_corrupt(&mut s, r, format!("node {a} is reachable twice"));
    let r = internal(&mut s, 1, vec![(1, a)]);
    expect_corrupt(&mut s, r, format!("root {r} is internal with one child"));
    // A cycle back to the root.
    let r = s.alloc_node().unwrap();
    s.write_node(
        r,
        Node::Internal {
            level: 1,
            children: vec![(1, a), (5, r)],
        }
        .encode(256),
    )
    .unwrap();
    expect_corrupt(&mut s, r, format!("node {r} is reachable twice"));
    // A garbage block: lookups and modifications report it, naming it.
    s.replace(b, vec![0xAB; 256]);
    let err = t.get(&mut s, good, 6).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { what } if what.contains(&format!("node {b}: "))),
        "{err}"
    );
    let mut root = good;
    assert!(t.insert(&mut s, &mut root, 9, b"x").is_err());
    assert!(t.remove(&mut s, &mut root, 5).is_err());
    assert_eq!(root, good);
    expect_corrupt(&mut s, good, format!("node {b}: B-tree node magic"));
}

/// Skipping the full check is only for bytes that passed it: a node that
/// fails once (bad CRC, read from a damaged device) fails on every read,
/// and is never remembered as verified.
#[test]
fn a_node_that_fails_its_check_fails_on_every_read() {
    let t = BTree::new(256).unwrap();
    let mut s = MemStore::new(256);
    let mut root = 0;
    for k in 0..200u64 {
        t.insert(&mut s, &mut root, k, &value(k, 1, 8)).unwrap();
    }
    s.checkpoint();
    assert_eq!(t.get(&mut s, root, 7).unwrap(), Some(value(7, 1, 8)));
    // The nodes on 7's path are verified now: the tree wrote them.
    let leaf = s.live().into_iter().find(|&p| {
        let n = NodeRef::parse(&s.blocks[&p], 256).unwrap();
        n.level() == 0 && n.key(0) <= 7 && (0..n.len()).any(|i| n.key(i) == 7)
    });
    let leaf = leaf.expect("a leaf holds key 7");
    assert!(s.verified.contains(&leaf));
    // One flipped bit in a value: only the CRC can tell.
    let mut bad = s.blocks[&leaf].clone();
    let last = bad.iter().rposition(|&b| b != 0).unwrap();
    bad[last] ^= 1;
    s.replace(leaf, bad);
    for _ in 0..3 {
        let err = t.get(&mut s, root, 7).unwrap_err();
        assert!(err.to_string().contains("crc"), "{err}");
        assert!(!s.verified.contains(&leaf));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u16, u8),
    Remove(u64),
    Lookup(u64),
    Checkpoint,
}

fn key() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..600, 1 => any::<u64>(), 1 => Just(u64::MAX), 1 => Just(0)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (key(), any::<u16>(), any::<u8>()).prop_map(|(k, l, s)| Op::Insert(k, l, s)),
        5 => key().prop_map(Op::Remove),
        4 => key().prop_map(Op::Lookup),
        1 => Just(Op::Checkpoint),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_btreemap(
        block_bytes in prop_oneof![Just(128usize), Just(256), Just(512), Just(4096)],
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let mut h = Harness::new(block_bytes);
        let max = h.t.max_value_bytes();
        for op in ops {
            match op {
                Op::Insert(k, len, seed) => {
                    // Bias towards small values so small blocks hold several.
                    let len = if seed % 4 == 0 { len as usize % (max + 1) } else { len as usize % (max / 4 + 1) };
                    h.insert(k, value(k, seed, len));
                }
                Op::Remove(k) => h.remove(k),
                Op::Lookup(k) => {
                    h.lookups(k);
                    h.lookups(k.wrapping_add(1));
                }
                Op::Checkpoint => {
                    h.checkpoint();
                    h.verify_snapshots();
                }
            }
            h.check();
        }
        h.verify_snapshots();
        prop_assert_eq!(contents(&h.t, &mut h.s, h.root), h.model.clone());
    }
}

/// Every node reachable from `root`.
fn reachable(t: &BTree, s: &mut MemStore, root: u64) -> HashSet<u64> {
    let mut all = HashSet::new();
    t.visit(s, root, &mut |v| {
        all.insert(v.ptr);
        Ok(())
    })
    .unwrap();
    all
}

/// Split `h`'s tree at `key` and check both halves: valid, holding exactly
/// the model's items below and from `key`, sharing no node, leaking none;
/// then that both go on taking inserts and removals.
fn split_and_check(h: &mut Harness, key: u64, seed: u8) {
    let mut right = h.t.split_off(&mut h.s, &mut h.root, key).unwrap();
    let right_model = h.model.split_off(&key);
    for (root, model) in [(h.root, &h.model), (right, &right_model)] {
        h.t.check(&mut h.s, root).unwrap();
        assert_eq!(&contents(&h.t, &mut h.s, root), model, "split at {key}");
        assert_eq!(root == 0, model.is_empty(), "split at {key}: empty side");
    }
    let (l, r) = (
        reachable(&h.t, &mut h.s, h.root),
        reachable(&h.t, &mut h.s, right),
    );
    assert!(l.is_disjoint(&r), "split at {key}: a node in both trees");
    assert_eq!(&l | &r, h.s.live(), "split at {key}: nodes leaked or lost");
    h.verify_snapshots();
    // Both halves are ordinary trees afterwards.
    for k in [key.wrapping_sub(1), key, key.wrapping_add(7)] {
        if right_model.contains_key(&k) {
            continue;
        }
        h.t.insert(&mut h.s, &mut right, k, &value(k, seed, 9))
            .unwrap();
        h.t.remove(&mut h.s, &mut right, k).unwrap();
        h.t.check(&mut h.s, right).unwrap();
    }
    assert_eq!(contents(&h.t, &mut h.s, right), right_model);
    let r = reachable(&h.t, &mut h.s, right);
    assert_eq!(&l | &r, h.s.live(), "after changes to the right half");
}

#[test]
fn split_off_at_the_edges() {
    for key in [0, 1, 199, 200, 201, 399, 400, u64::MAX] {
        let mut h = Harness::new(128);
        for k in (0..400).step_by(2) {
            h.insert(k, value(k, 1, 5));
        }
        h.checkpoint();
        split_and_check(&mut h, key, 2);
    }
    let mut h = Harness::new(128);
    assert_eq!(h.t.split_off(&mut h.s, &mut h.root, 5).unwrap(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn split_off_matches_btreemap(
        block_bytes in prop_oneof![Just(128usize), Just(256), Just(4096)],
        keys in proptest::collection::vec(key(), 0..700),
        checkpoint_at in proptest::option::of(0usize..700),
        at in prop_oneof![key(), Just(300u64)],
        seed in any::<u8>(),
    ) {
        let mut h = Harness::new(block_bytes);
        for (n, k) in keys.iter().enumerate() {
            if checkpoint_at == Some(n) {
                h.checkpoint();
            }
            h.insert(*k, value(*k, seed, (*k % 23) as usize));
        }
        split_and_check(&mut h, at, seed);
    }
}
