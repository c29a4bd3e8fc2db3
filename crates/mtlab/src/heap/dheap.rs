//! A max-heap whose nodes have four children: the heap of a region's block
//! ends (`model::Region::ends`).
//!
//! A binary heap of a large program's ends holds millions of entries, most
//! of them stale (lazy deletion), and each stale entry that reaches the top
//! is popped: a pop walks from the root to a leaf. With two children a
//! node, that walk is 22 levels for 5 M entries and the lower ten miss the
//! cache, one line each; with four it is 11 levels and a node's children
//! share a line or two. A python3 run of 24 M events spent 34 % of its
//! report popping a `std` binary heap.

/// Children of a node.
const D: usize = 4;

#[derive(Clone, Debug)]
pub(crate) struct DHeap<T: Ord + Copy> {
    v: Vec<T>,
}

impl<T: Ord + Copy> Default for DHeap<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Ord + Copy> DHeap<T> {
    pub fn new() -> Self {
        DHeap { v: Vec::new() }
    }

    /// A heap of `v`'s entries, kept in its buffer.
    pub fn from_vec(v: Vec<T>) -> Self {
        let mut h = DHeap { v };
        let n = h.v.len();
        if n > 1 {
            for i in (0..=(n - 2) / D).rev() {
                h.sift_down(i, n);
            }
        }
        h
    }

    pub fn into_vec(self) -> Vec<T> {
        self.v
    }

    pub fn len(&self) -> usize {
        self.v.len()
    }

    pub fn peek(&self) -> Option<&T> {
        self.v.first()
    }

    /// The entries that can be the top after a `pop`: the top's children.
    pub fn next_tops(&self) -> &[T] {
        &self.v[1.min(self.v.len())..(D + 1).min(self.v.len())]
    }

    /// The entries in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.v.iter()
    }

    pub fn push(&mut self, x: T) {
        self.v.push(x);
        self.sift_up(self.v.len() - 1);
    }

    pub fn pop(&mut self) -> Option<T> {
        let last = self.v.pop()?;
        let Some(&top) = self.v.first() else { return Some(last) };
        // The hole at the root goes down the larger children to a leaf,
        // where the last entry is put and sifted up: it came from a leaf
        // and most often stays near one, so this compares less than a
        // sift down that checks it at every level.
        let n = self.v.len();
        let mut hole = 0;
        loop {
            let first = D * hole + 1;
            if first >= n {
                break;
            }
            let big = self.largest_child(first, n);
            self.v[hole] = self.v[big];
            hole = big;
        }
        self.v[hole] = last;
        self.sift_up(hole);
        Some(top)
    }

    /// Moves every entry of `more` in, leaving it empty with the buffer of
    /// the two that was not needed.
    pub fn append(&mut self, more: &mut Vec<T>) {
        let larger = more.len() > self.v.len();
        if larger {
            // The larger buffer is kept, not copied into the smaller (3 M
            // blocks allocated, then freed: 48 MiB more at the first merge).
            // It is no heap: the whole is heap-built below.
            std::mem::swap(&mut self.v, more);
        }
        if larger || more.len() > self.v.len() / 2 {
            // Heap-building the whole is linear; pushing each one may sift
            // it all the way up.
            self.v.append(more);
            *self = Self::from_vec(std::mem::take(&mut self.v));
        } else {
            for x in more.drain(..) {
                self.push(x);
            }
        }
    }

    #[inline]
    fn largest_child(&self, first: usize, n: usize) -> usize {
        let last = (first + D).min(n);
        let mut big = first;
        for c in first + 1..last {
            if self.v[c] > self.v[big] {
                big = c;
            }
        }
        big
    }

    fn sift_up(&mut self, mut i: usize) {
        let x = self.v[i];
        while i > 0 {
            let parent = (i - 1) / D;
            if self.v[parent] >= x {
                break;
            }
            self.v[i] = self.v[parent];
            i = parent;
        }
        self.v[i] = x;
    }

    fn sift_down(&mut self, mut i: usize, n: usize) {
        let x = self.v[i];
        loop {
            let first = D * i + 1;
            if first >= n {
                break;
            }
            let big = self.largest_child(first, n);
            if self.v[big] <= x {
                break;
            }
            self.v[i] = self.v[big];
            i = big;
        }
        self.v[i] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_come_out_as_a_binary_heap_gives_them() {
        let mut x = 88172645463325252u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ours: DHeap<(u64, u32)> = DHeap::from_vec((0..1000).map(|i| (rnd() % 5000, i)).collect());
        let mut reference: BinaryHeap<(u64, u32)> = ours.iter().copied().collect();
        for step in 0..200_000u32 {
            match rnd() % 7 {
                0..=2 => {
                    let e = (rnd() % 5000, step);
                    ours.push(e);
                    reference.push(e);
                }
                3 => {
                    // Now and then a batch larger than the heap (its buffer is kept).
                    let n = if rnd() % 50 == 0 && ours.len() < 20_000 { 2 * ours.len() as u64 + 1 + rnd() % 100 } else { rnd() % 40 };
                    let mut batch: Vec<(u64, u32)> = (0..n).map(|k| (rnd() % 5000, step * 4096 + k as u32)).collect();
                    reference.extend(batch.iter().copied());
                    ours.append(&mut batch);
                    assert!(batch.is_empty());
                }
                _ => assert_eq!(ours.pop(), reference.pop()),
            }
            assert_eq!(ours.peek(), reference.peek());
            assert_eq!(ours.len(), reference.len());
        }
        while let Some(e) = reference.pop() {
            assert_eq!(ours.pop(), Some(e));
        }
        assert_eq!(ours.pop(), None);
    }

    #[test]
    fn a_large_batch_is_heap_built() {
        let mut h: DHeap<u32> = DHeap::from_vec(vec![5, 1, 9]);
        let mut batch: Vec<u32> = (10..100).collect();
        h.append(&mut batch);
        let mut out = Vec::new();
        while let Some(x) = h.pop() {
            out.push(x);
        }
        let mut want: Vec<u32> = (10..100).chain([5, 1, 9]).collect();
        want.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(out, want);
    }
}
