//! Decoded trace items: what the rest of mtlab sees of a trace file.

/// An intercepted function, as named in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Func {
    Malloc,
    Free,
    Calloc,
    Realloc,
    Reallocarray,
    PosixMemalign,
    AlignedAlloc,
    Memalign,
    Valloc,
    Pvalloc,
    Mmap,
    Mmap64,
    Munmap,
    Mremap,
    Brk,
    Sbrk,
    MallocUsableSize,
    // C++ operator new, in the order of its forms (format::NEW_* bits).
    New,
    NewArray,
    NewNothrow,
    NewArrayNothrow,
    NewAligned,
    NewArrayAligned,
    NewAlignedNothrow,
    NewArrayAlignedNothrow,
    // C++ operator delete, in the order of its forms (format::DELETE_* bits;
    // the sized forms take no nothrow).
    Delete,
    DeleteArray,
    DeleteNothrow,
    DeleteArrayNothrow,
    DeleteAligned,
    DeleteArrayAligned,
    DeleteAlignedNothrow,
    DeleteArrayAlignedNothrow,
    DeleteSized,
    DeleteArraySized,
    DeleteSizedAligned,
    DeleteArraySizedAligned,
}

/// operator new's forms, indexed by the trace's form (bits: array, nothrow, aligned).
const NEW_FORMS: [Func; 8] = [
    Func::New,
    Func::NewArray,
    Func::NewNothrow,
    Func::NewArrayNothrow,
    Func::NewAligned,
    Func::NewArrayAligned,
    Func::NewAlignedNothrow,
    Func::NewArrayAlignedNothrow,
];

/// operator delete's forms, indexed by the trace's form (bits: array,
/// nothrow, aligned, sized); `None` where C++ has no such form.
const DELETE_FORMS: [Option<Func>; 16] = [
    Some(Func::Delete),
    Some(Func::DeleteArray),
    Some(Func::DeleteNothrow),
    Some(Func::DeleteArrayNothrow),
    Some(Func::DeleteAligned),
    Some(Func::DeleteArrayAligned),
    Some(Func::DeleteAlignedNothrow),
    Some(Func::DeleteArrayAlignedNothrow),
    Some(Func::DeleteSized),
    Some(Func::DeleteArraySized),
    None,
    None,
    Some(Func::DeleteSizedAligned),
    Some(Func::DeleteArraySizedAligned),
    None,
    None,
];

impl Func {
    pub const ALL: [Func; 37] = [
        Func::Malloc,
        Func::Free,
        Func::Calloc,
        Func::Realloc,
        Func::Reallocarray,
        Func::PosixMemalign,
        Func::AlignedAlloc,
        Func::Memalign,
        Func::Valloc,
        Func::Pvalloc,
        Func::Mmap,
        Func::Mmap64,
        Func::Munmap,
        Func::Mremap,
        Func::Brk,
        Func::Sbrk,
        Func::MallocUsableSize,
        Func::New,
        Func::NewArray,
        Func::NewNothrow,
        Func::NewArrayNothrow,
        Func::NewAligned,
        Func::NewArrayAligned,
        Func::NewAlignedNothrow,
        Func::NewArrayAlignedNothrow,
        Func::Delete,
        Func::DeleteArray,
        Func::DeleteNothrow,
        Func::DeleteArrayNothrow,
        Func::DeleteAligned,
        Func::DeleteArrayAligned,
        Func::DeleteAlignedNothrow,
        Func::DeleteArrayAlignedNothrow,
        Func::DeleteSized,
        Func::DeleteArraySized,
        Func::DeleteSizedAligned,
        Func::DeleteArraySizedAligned,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Malloc => "malloc",
            Func::Free => "free",
            Func::Calloc => "calloc",
            Func::Realloc => "realloc",
            Func::Reallocarray => "reallocarray",
            Func::PosixMemalign => "posix_memalign",
            Func::AlignedAlloc => "aligned_alloc",
            Func::Memalign => "memalign",
            Func::Valloc => "valloc",
            Func::Pvalloc => "pvalloc",
            Func::Mmap => "mmap",
            Func::Mmap64 => "mmap64",
            Func::Munmap => "munmap",
            Func::Mremap => "mremap",
            Func::Brk => "brk",
            Func::Sbrk => "sbrk",
            Func::MallocUsableSize => "malloc_usable_size",
            Func::New => "operator new",
            Func::NewArray => "operator new[]",
            Func::NewNothrow => "operator new(nothrow)",
            Func::NewArrayNothrow => "operator new[](nothrow)",
            Func::NewAligned => "operator new(align)",
            Func::NewArrayAligned => "operator new[](align)",
            Func::NewAlignedNothrow => "operator new(align nothrow)",
            Func::NewArrayAlignedNothrow => "operator new[](align nothrow)",
            Func::Delete => "operator delete",
            Func::DeleteArray => "operator delete[]",
            Func::DeleteNothrow => "operator delete(nothrow)",
            Func::DeleteArrayNothrow => "operator delete[](nothrow)",
            Func::DeleteAligned => "operator delete(align)",
            Func::DeleteArrayAligned => "operator delete[](align)",
            Func::DeleteAlignedNothrow => "operator delete(align nothrow)",
            Func::DeleteArrayAlignedNothrow => "operator delete[](align nothrow)",
            Func::DeleteSized => "operator delete(size)",
            Func::DeleteArraySized => "operator delete[](size)",
            Func::DeleteSizedAligned => "operator delete(size align)",
            Func::DeleteArraySizedAligned => "operator delete[](size align)",
        }
    }

    /// The operator new of the trace's form number.
    pub fn from_new_form(form: u64) -> Option<Func> {
        NEW_FORMS.get(usize::try_from(form).ok()?).copied()
    }

    /// The trace's form number of an operator new.
    pub fn new_form(self) -> Option<u64> {
        NEW_FORMS.iter().position(|&f| f == self).map(|i| i as u64)
    }

    /// The operator delete of the trace's form number.
    pub fn from_delete_form(form: u64) -> Option<Func> {
        DELETE_FORMS.get(usize::try_from(form).ok()?).copied().flatten()
    }

    /// The trace's form number of an operator delete.
    pub fn delete_form(self) -> Option<u64> {
        DELETE_FORMS.iter().position(|&f| f == Some(self)).map(|i| i as u64)
    }

    /// The function a SAMPLE event's `func` value stands for: an allocation
    /// kind, or EV_NEW with the form above the kind bits.
    pub fn from_sample_func(v: u64) -> Option<Func> {
        use super::format::*;
        if v & u64::from(KIND_MASK) == u64::from(EV_NEW) {
            return Func::from_new_form(v >> 5);
        }
        u8::try_from(v).ok().and_then(Func::from_alloc_kind)
    }

    /// A SAMPLE event's `func` value for this function (an allocation one).
    pub fn sample_func(self) -> Option<u64> {
        use super::format::*;
        match self.new_form() {
            Some(form) => Some(u64::from(EV_NEW) | form << 5),
            None => self.alloc_kind().map(u64::from),
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The function an allocation event kind of the trace format stands for.
    pub fn from_alloc_kind(kind: u8) -> Option<Func> {
        use super::format::*;
        Some(match kind {
            EV_MALLOC => Func::Malloc,
            EV_CALLOC => Func::Calloc,
            EV_REALLOC => Func::Realloc,
            EV_REALLOCARRAY => Func::Reallocarray,
            EV_POSIX_MEMALIGN => Func::PosixMemalign,
            EV_ALIGNED_ALLOC => Func::AlignedAlloc,
            EV_MEMALIGN => Func::Memalign,
            EV_VALLOC => Func::Valloc,
            EV_PVALLOC => Func::Pvalloc,
            _ => return None,
        })
    }

    /// The trace format's event kind of an allocation function.
    pub fn alloc_kind(self) -> Option<u8> {
        use super::format::*;
        Some(match self {
            Func::Malloc => EV_MALLOC,
            Func::Calloc => EV_CALLOC,
            Func::Realloc => EV_REALLOC,
            Func::Reallocarray => EV_REALLOCARRAY,
            Func::PosixMemalign => EV_POSIX_MEMALIGN,
            Func::AlignedAlloc => EV_ALIGNED_ALLOC,
            Func::Memalign => EV_MEMALIGN,
            Func::Valloc => EV_VALLOC,
            Func::Pvalloc => EV_PVALLOC,
            _ => return None,
        })
    }
}

/// Event flag bits (high 3 bits of the kind byte), see docs/trace-format.md.
pub const FLAG_CHUNK_MMAPPED: u8 = 0x20;
pub const FLAG_IN_ALLOCATOR: u8 = 0x40;
pub const FLAG_FAILED: u8 = 0x80;

/// An event's `cycles` when its call was not timed: a full trace times a
/// random sample of calls by default (header `time_sample`).
pub const UNTIMED: u64 = u64::MAX;

impl Event {
    /// The cycles of the real call, if it was timed.
    #[inline]
    pub fn timed_cycles(&self) -> Option<u64> {
        (self.cycles != UNTIMED).then_some(self.cycles)
    }
}

/// One traced call, or one heap-extent observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub tid: u32,
    /// Absolute TSC when the call began.
    pub tsc: u64,
    /// TSC cycles spent inside the real function; [`UNTIMED`] when the call
    /// was not among the timed sample (`record --time`).
    pub cycles: u64,
    /// Stack id (0: none recorded).
    pub stack: u32,
    /// FLAG_* bits.
    pub flags: u8,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// malloc, calloc, posix_memalign, aligned_alloc, memalign, valloc,
    /// pvalloc, and C++'s operator new in its forms.
    /// `size` is the requested byte count (nmemb*size for calloc); `align` is 0
    /// where the function takes none; `ptr` is 0 on failure.
    Alloc { func: Func, size: u64, align: u64, ptr: u64, usable: u64 },
    /// free, or an operator delete (`func`); `ptr` 0: free(NULL) or
    /// `delete nullptr`, a call that frees nothing.
    Free { func: Func, ptr: u64 },
    /// malloc_usable_size(ptr) returned `usable`: a call that changes nothing.
    UsableSize { ptr: u64, usable: u64 },
    /// realloc and reallocarray (`size` = nmemb*size).
    Realloc { func: Func, old: u64, size: u64, ptr: u64, usable: u64 },
    /// mmap and mmap64.
    Mmap { func: Func, hint: u64, len: u64, prot: u64, flags: u64, fd: i64, offset: u64, result: u64 },
    Munmap { addr: u64, len: u64, ret: i64 },
    Mremap { old: u64, old_len: u64, new_len: u64, flags: u64, result: u64 },
    Brk { addr: u64, ret: i64, brk_after: u64 },
    Sbrk { increment: i64, result: u64, brk_after: u64 },
    /// The allocator moved the program break (observed, not a call).
    BrkSeen { brk: u64 },
    /// A glibc non-main-arena heap now spans [base, base+size).
    ArenaHeap { base: u64, size: u64 },
    /// A sampled allocation (sampling mode): `func` allocated `size` bytes at
    /// `ptr` while the mean sampling interval was `interval` bytes.
    Sample { func: Func, size: u64, ptr: u64, interval: u64 },
    /// A sampled block was freed (or moved away by realloc).
    SampleFree { ptr: u64 },
}

impl EventKind {
    /// The intercepted function this event counts towards, if it is a call.
    pub fn func(&self) -> Option<Func> {
        match *self {
            EventKind::Alloc { func, .. } | EventKind::Realloc { func, .. } | EventKind::Mmap { func, .. } => Some(func),
            EventKind::Free { func, .. } => Some(func),
            EventKind::UsableSize { .. } => Some(Func::MallocUsableSize),
            EventKind::Munmap { .. } => Some(Func::Munmap),
            EventKind::Mremap { .. } => Some(Func::Mremap),
            EventKind::Brk { .. } => Some(Func::Brk),
            EventKind::Sbrk { .. } => Some(Func::Sbrk),
            EventKind::BrkSeen { .. }
            | EventKind::ArenaHeap { .. }
            | EventKind::Sample { .. }
            | EventKind::SampleFree { .. } => None,
        }
    }
}

/// What the decoder yields, in global time order for events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A call stack definition: program counters, innermost first.
    Stack { id: u32, pcs: Vec<u64> },
    Event(Event),
}
