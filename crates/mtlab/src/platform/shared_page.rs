//! A page of memory shared with a traced process (the sampler's control
//! page, the watermark page): mapped from a file, read and written only
//! through atomics at fixed offsets, unmapped on drop.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64};

pub struct SharedPage {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the page is only accessed through atomics (and read-only byte views).
unsafe impl Send for SharedPage {}
// SAFETY: as for Send: no access through &SharedPage is a plain write.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    /// Maps the first `len` bytes of `file` (at least that long), shared, read-write.
    pub fn map(file: &impl AsRawFd, len: usize) -> std::io::Result<SharedPage> {
        // SAFETY: a fresh shared mapping of `len` bytes of an open file; the
        // result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedPage { ptr: ptr as *mut u8, len })
    }

    pub fn u32_at(&self, off: u32) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off as usize + 4 <= self.len, "u32 field at {off}");
        // SAFETY: in bounds and 4-aligned (checked; the mapping is page-aligned);
        // the other process accesses the field only atomically.
        unsafe { &*(self.ptr.add(off as usize) as *const AtomicU32) }
    }

    pub fn u64_at(&self, off: u32) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off as usize + 8 <= self.len, "u64 field at {off}");
        // SAFETY: as u32_at, for 8-aligned 64-bit fields.
        unsafe { &*(self.ptr.add(off as usize) as *const AtomicU64) }
    }

    /// The bytes from `off` to the end of the page (text fields).
    pub fn bytes_from(&self, off: u32) -> &[u8] {
        let off = (off as usize).min(self.len);
        // SAFETY: within the mapping, which lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), self.len - off) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: ptr and len come from the successful mmap in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
