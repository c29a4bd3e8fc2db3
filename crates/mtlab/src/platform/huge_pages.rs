//! Asking the kernel to back a large table with 2 MiB pages.
//!
//! The report's live-block table and slab are read at random addresses over
//! hundreds of MiB: with 4 KiB pages nearly every lookup also misses the TLB,
//! and in a virtual machine a page walk goes through two sets of tables. The
//! host's transparent huge pages are often `madvise` only, so a table asks.

/// Makes room for `additional` more entries in `v`, a vector read at
/// random (the slab of blocks). Once it holds `from_bytes` or more, a full
/// vector doubles into memory advised for huge pages, every page of it:
/// the entries are moved, not `realloc`ed, which would keep the old 4 KiB
/// pages. The move holds both copies for a moment.
#[inline]
pub fn reserve<T>(v: &mut Vec<T>, additional: usize, from_bytes: usize) {
    if v.capacity() - v.len() >= additional {
        return;
    }
    if std::mem::size_of_val(v.as_slice()) < from_bytes {
        v.reserve(additional);
        return;
    }
    grow(v, additional);
}

#[inline(never)]
fn grow<T>(v: &mut Vec<T>, additional: usize) {
    let mut bigger = Vec::with_capacity((2 * v.capacity()).max(v.len() + additional));
    advise(bigger.spare_capacity_mut());
    bigger.append(v);
    *v = bigger;
}

/// Advises huge pages for the memory of `table` (best effort: nothing
/// happens where transparent huge pages are off, or the range holds no
/// aligned 2 MiB). Call it before the pages are first touched.
pub fn advise<T>(table: &mut [T]) {
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => return,
    };
    // MADV_HUGEPAGE changes how memory is backed, never its contents, and
    // its failure (EINVAL without transparent huge pages) is harmless.
    madvise_inside(table, page, libc::MADV_HUGEPAGE);
}

/// `madvise(advice)` over the whole `unit`s (a power of two) inside
/// `table`'s memory; `advice` must never change the memory's contents.
fn madvise_inside<T>(table: &mut [T], unit: usize, advice: libc::c_int) {
    let start = table.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(table);
    // madvise rounds a length up: only whole units inside the slice.
    let (first, last) = (start.next_multiple_of(unit), end / unit * unit);
    if last <= first {
        return;
    }
    // SAFETY: [first, last) is whole pages of memory this slice owns, and
    // the callers' advice leaves their contents as they are.
    unsafe {
        libc::madvise(first as *mut libc::c_void, last - first, advice);
    }
}

/// Turns the 2 MiB-aligned parts of `table` that are in 4 KiB pages into
/// huge pages now (`MADV_COLLAPSE`, Linux 6.1 on; best effort: nothing
/// happens where the kernel cannot). For a table whose pages were touched
/// before it was advised, or that a move split: advice only shapes the
/// pages touched after it.
pub fn collapse<T>(table: &mut [T]) {
    // MADV_COLLAPSE copies pages into huge pages, never changing their
    // contents; its failure (EINVAL on older kernels, EAGAIN without free
    // huge pages) is harmless.
    madvise_inside(table, 2 << 20, libc::MADV_COLLAPSE);
}
