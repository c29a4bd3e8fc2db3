//! A table of `(u64, u64)` pairs in its own anonymous mapping, zeroed when
//! made and grown in place with `mremap`.
//!
//! A `Vec` grows by allocating the larger buffer and copying: for a moment
//! both are resident. The report's live-block table is most of its memory
//! (python3 with 2.8 M live blocks: the old table and the new one were
//! 64 + 128 MiB at the peak), so it grows by remapping: the kernel moves the
//! pages, the new tail is fresh zero pages, and the peak is the new size.

/// Pairs of u64 in an anonymous mapping; every pair starts as (0, 0). Its
/// length is a whole number of pages (more pairs than asked for, at most a
/// page's worth): `madvise` on part of a mapping splits it in two, and
/// `mremap` then refuses to grow it (EFAULT).
pub struct AnonPairs {
    ptr: *mut (u64, u64),
    len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a Box's memory.
unsafe impl Send for AnonPairs {}
// SAFETY: shared references only read; writes need `&mut self`.
unsafe impl Sync for AnonPairs {}

const PAIR: usize = std::mem::size_of::<(u64, u64)>();

/// Bytes from which a table asks for 2 MiB pages (`huge_pages::advise`).
const HUGE_FROM: usize = 16 << 20;

/// `len` pairs rounded up to whole 4 KiB pages (at least one).
fn whole_pages(len: usize) -> usize {
    len.max(1).next_multiple_of(4096 / PAIR)
}

impl AnonPairs {
    /// `len` pairs of zeros. Panics when the kernel refuses the memory, as
    /// a `Vec` does.
    pub fn zeroed(len: usize) -> AnonPairs {
        let len = whole_pages(len);
        // SAFETY: a fresh private anonymous mapping: no address given, no file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * PAIR,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(std::alloc::Layout::array::<(u64, u64)>(len).expect("size fits"));
        }
        let mut t = AnonPairs { ptr: p as *mut (u64, u64), len };
        t.advise();
        t
    }

    /// Grows to `len` pairs (no shrinking): the first pairs keep their
    /// values, the new ones are (0, 0).
    pub fn grow(&mut self, len: usize) {
        if len <= self.len {
            return;
        }
        let len = whole_pages(len);
        // SAFETY: [ptr, ptr + self.len * PAIR) is this value's mapping; the
        // kernel may move it (MREMAP_MAYMOVE), and `ptr` is replaced by the
        // new address before any further use.
        let p = unsafe { libc::mremap(self.ptr as *mut libc::c_void, self.len * PAIR, len * PAIR, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(std::alloc::Layout::array::<(u64, u64)>(len).expect("size fits"));
        }
        self.ptr = p as *mut (u64, u64);
        self.len = len;
        self.advise();
        if len * PAIR >= HUGE_FROM {
            // The pages touched while the table was small, and those a
            // move split, are 4 KiB pages still.
            super::huge_pages::collapse(&mut self[..]);
        }
    }

    fn advise(&mut self) {
        if self.len * PAIR >= HUGE_FROM {
            super::huge_pages::advise(&mut self[..]);
        }
    }
}

impl std::ops::Deref for AnonPairs {
    type Target = [(u64, u64)];
    fn deref(&self) -> &[(u64, u64)] {
        // SAFETY: `len` pairs of mapped, readable memory owned by self;
        // any bit pattern is a valid pair of u64.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AnonPairs {
    fn deref_mut(&mut self) -> &mut [(u64, u64)] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AnonPairs {
    fn drop(&mut self) {
        // SAFETY: the mapping is this value's and nothing refers to it any more.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len * PAIR);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_keeps_the_values_and_zeroes_the_rest() {
        let mut t = AnonPairs::zeroed(1000);
        assert_eq!(t.len(), 1024);
        assert!(t.iter().all(|&p| p == (0, 0)));
        for (i, p) in t[..1000].iter_mut().enumerate() {
            *p = (i as u64, !(i as u64));
        }
        // Past HUGE_FROM too: the advice on a moved mapping.
        t.grow(2 << 20);
        assert_eq!(t.len(), 2 << 20);
        t[(2 << 20) - 1] = (1, 1);
        // Once advised, grown again (a part advised alone would split the mapping).
        t.grow((2 << 20) + 1);
        assert_eq!(t.len(), (2 << 20) + 256, "whole pages");
        assert_eq!(t[(2 << 20) - 1], (1, 1));
        assert!(t[..1000].iter().enumerate().all(|(i, &p)| p == (i as u64, !(i as u64))));
        assert!(t[1000..(2 << 20) - 1].iter().all(|&p| p == (0, 0)));
        assert!(t[2 << 20..].iter().all(|&p| p == (0, 0)));
        t.grow(10);
        assert_eq!(t.len(), (2 << 20) + 256, "no shrinking");
    }
}
