//! Asking the kernel to back a large table with 2 MiB pages.
//!
//! The report's live-block table and slab are read at random addresses over
//! hundreds of MiB: with 4 KiB pages nearly every lookup also misses the TLB,
//! and in a virtual machine a page walk goes through two sets of tables. The
//! host's transparent huge pages are often `madvise` only, so a table asks.

/// Advises huge pages for the memory of `table` (best effort: nothing
/// happens where transparent huge pages are off, or the range holds no
/// aligned 2 MiB). Call it before the pages are first touched.
pub fn advise<T>(table: &mut [T]) {
    const PAGE: usize = 4096;
    let start = table.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(table);
    let first = start.next_multiple_of(PAGE);
    if end <= first {
        return;
    }
    // SAFETY: the range lies inside memory this slice owns, page-aligned
    // at its start; MADV_HUGEPAGE changes how it is backed, never its
    // contents, and its failure (EINVAL without THP) is harmless.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}
