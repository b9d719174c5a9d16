//! CLOCK: a ring of frames with a reference bit; the hand clears set bits and evicts the first
//! frame whose bit is clear. A new page takes the evicted frame, behind the hand, with its bit
//! set, so it survives one full rotation.

use std::collections::HashMap;
use std::hash::Hash;

use super::Replacement;

struct Frame<K> {
    key: K,
    referenced: bool,
    dirty: bool,
}

pub struct Clock<K> {
    frames: Vec<Option<Frame<K>>>,
    frame_of: HashMap<K, usize>,
    free_frames: Vec<usize>,
    hand: usize,
    dirty_pages: usize,
}

impl<K: Hash + Eq + Clone> Clock<K> {
    pub fn new(capacity_pages: usize) -> Self {
        assert!(capacity_pages > 0);
        Self {
            frames: (0..capacity_pages).map(|_| None).collect(),
            frame_of: HashMap::new(),
            free_frames: (0..capacity_pages).rev().collect(),
            hand: 0,
            dirty_pages: 0,
        }
    }

    fn evict_frame(&mut self, index: usize) -> K {
        let frame = self.frames[index].take().expect("occupied frame");
        self.frame_of.remove(&frame.key);
        self.free_frames.push(index);
        if frame.dirty {
            self.dirty_pages -= 1;
        }
        frame.key
    }
}

impl<K: Hash + Eq + Clone> Replacement<K> for Clock<K> {
    fn name(&self) -> &'static str {
        "clock"
    }
    fn insert(&mut self, key: K, dirty: bool) {
        assert!(!self.frame_of.contains_key(&key));
        let index = self.free_frames.pop().expect("insert into a full cache");
        self.frames[index] = Some(Frame {
            key: key.clone(),
            referenced: true,
            dirty,
        });
        self.frame_of.insert(key, index);
        self.dirty_pages += dirty as usize;
    }
    fn touch(&mut self, key: &K, write: bool) {
        if let Some(&i) = self.frame_of.get(key) {
            let f = self.frames[i].as_mut().expect("occupied frame");
            f.referenced = true;
            if write && !f.dirty {
                f.dirty = true;
                self.dirty_pages += 1;
            }
        }
    }
    fn mark_clean(&mut self, key: &K) {
        if let Some(&i) = self.frame_of.get(key) {
            let f = self.frames[i].as_mut().expect("occupied frame");
            if f.dirty {
                f.dirty = false;
                self.dirty_pages -= 1;
            }
        }
    }
    fn remove(&mut self, key: &K) {
        if let Some(&i) = self.frame_of.get(key) {
            self.evict_frame(i);
        }
    }
    fn victim(&mut self, allow_dirty: bool) -> Option<K> {
        if self.frame_of.is_empty() || (!allow_dirty && self.dirty_pages == self.frame_of.len()) {
            return None;
        }
        // Two rotations clear every bit; a third finds a frame that qualifies.
        for _ in 0..3 * self.frames.len() {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.frames.len();
            let Some(f) = self.frames[i].as_mut() else {
                continue;
            };
            if f.referenced {
                f.referenced = false;
            } else if allow_dirty || !f.dirty {
                return Some(self.evict_frame(i));
            }
        }
        unreachable!("clock hand exceeded three rotations");
    }
    fn len(&self) -> usize {
        self.frame_of.len()
    }
    fn capacity(&self) -> usize {
        self.frames.len()
    }
    fn writeback_candidates(&mut self, max_keys: usize) -> Vec<K> {
        let n = self.frames.len();
        (0..n)
            .filter_map(|d| self.frames[(self.hand + d) % n].as_ref())
            .filter(|f| f.dirty)
            .take(max_keys)
            .map(|f| f.key.clone())
            .collect()
    }
}
