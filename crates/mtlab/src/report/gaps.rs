//! Why the heap manager's own figures at exit differ from mtlab's: the
//! reason printed beside each gap, so "mapped 528 KiB (mtlab: 4.9 MiB)" does
//! not stand unexplained. The reasons are the counting rules of each heap
//! manager (measured for glibc: `tests/e2e.rs`, a program whose freed blocks
//! sit in the thread cache, with and without `glibc.malloc.tcache_count=0`).

/// Gaps below this share of the heap manager's figure are rounding, not a
/// difference of what is counted.
const NOISE: f64 = 0.01;

/// Which figure is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    InUse,
    Mapped,
}

/// The reason mtlab's figure (`ours`) differs from the heap manager's
/// (`theirs`), or `None` when they agree within 1 %.
pub fn reason(figure: Figure, allocator: &str, theirs: u64, ours: u64) -> Option<&'static str> {
    let gap = ours as f64 - theirs as f64;
    if theirs == ours || gap.abs() <= NOISE * theirs.max(1) as f64 {
        return None;
    }
    let more = ours > theirs;
    Some(match (figure, allocator, more) {
        (Figure::InUse, "glibc", false) => {
            "glibc counts as in use its per-thread cache table (656 B for each thread that allocated) and the \
             freed blocks of up to 1032 B its thread caches (tcache, 7 per size) still hold; mtlab counts the \
             blocks the program holds"
        }
        (Figure::InUse, "jemalloc", false) => {
            "jemalloc counts as allocated the freed blocks its thread caches still hold, and rounds each block up \
             to its size class; mtlab counts the blocks the program holds"
        }
        (Figure::InUse, _, false) => {
            "the heap manager counts its own internal allocations and the freed blocks it caches per thread; \
             mtlab counts the blocks the program holds"
        }
        (Figure::InUse, _, true) => {
            "blocks allocated before tracing started and freed while traced lower the heap manager's figure, \
             not mtlab's (it never saw them allocated)"
        }
        (Figure::Mapped, _, true) => {
            "mtlab counts whole address ranges it saw the heap manager map or grow; the heap manager counts \
             only the part its arenas hold (e.g. a glibc thread arena's reserved heap, or pages released to \
             the system but kept mapped)"
        }
        (Figure::Mapped, _, false) => {
            "the heap manager's figure includes memory it mapped for its own bookkeeping, or through calls \
             mtlab does not see as the heap's; mtlab counts the regions it saw the heap manager map"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{reason, Figure};

    #[test]
    fn a_gap_gets_the_reason_of_its_direction() {
        assert_eq!(reason(Figure::InUse, "glibc", 1000, 1000), None);
        assert_eq!(reason(Figure::Mapped, "glibc", 100_000, 100_500), None, "within 1 %");
        assert!(reason(Figure::InUse, "glibc", 1440, 0).unwrap().contains("tcache"));
        assert!(reason(Figure::InUse, "jemalloc", 2000, 1000).unwrap().contains("size class"));
        assert!(reason(Figure::InUse, "glibc", 1000, 2000).unwrap().contains("before tracing started"));
        assert!(reason(Figure::Mapped, "glibc", 528 << 10, 4900 << 10).unwrap().starts_with("mtlab counts whole"));
        assert!(reason(Figure::Mapped, "tcmalloc", 4900 << 10, 528 << 10).unwrap().contains("bookkeeping"));
        assert!(reason(Figure::InUse, "glibc", 0, 10).is_some(), "a figure of 0 against any bytes is a gap");
    }
}
