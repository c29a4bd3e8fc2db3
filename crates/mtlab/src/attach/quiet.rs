//! The unload check at detach: may a stopped thread still return or jump
//! into the library's code once it is unloaded?
//!
//! What counts: its registers, the return addresses of its live frames and
//! the slots those frames will restore registers from (unwind.rs). A
//! function pointer the program read while attached (a GOT slot routed to a
//! shim) is not the library's: it points to a stub outside it, put back to
//! the real function by the end call. A dead slot does not count:
//! an unwritten local of the frame a thread blocks in still holds the return
//! addresses a deeper, finished call into the library wrote there, and that
//! kept the library loaded for every thread that had called malloc before
//! it blocked. Where the stack cannot be unwound exactly, every word of it
//! in the library's code counts, as it did before.

use super::ptrace;
use super::unwind::{self, FrameRules, Stack, UnwindError};

/// The library's code in the process (its executable mappings).
pub struct Library {
    code: Vec<(u64, u64)>,
}

impl Library {
    pub fn new(code: Vec<(u64, u64)>) -> Library {
        Library { code }
    }

    pub fn inside(&self, a: u64) -> bool {
        self.code.iter().any(|&(lo, hi)| a >= lo && a < hi)
    }
}

/// What a thread still holds of the library, that it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Register(u64),
    ReturnAddress(u64),
    SavedRegister { slot: u64, value: u64 },
    /// The stack could not be unwound, and a word of it is in the code.
    StackWord { slot: u64, value: u64, why: UnwindError },
    Unreadable { rsp: u64 },
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Register(v) => write!(f, "{v:#x} in a register"),
            Held::ReturnAddress(v) => write!(f, "a live frame returns to {v:#x}"),
            Held::SavedRegister { slot, value } => write!(f, "a saved register holds {value:#x} (at {slot:#x})"),
            Held::StackWord { slot, value, why } => write!(f, "the stack holds {value:#x} (at {slot:#x}; not unwound: {why})"),
            Held::Unreadable { rsp } => write!(f, "its stack at {rsp:#x} cannot be read"),
        }
    }
}

/// What thread with registers `regs` and stack `stack` (None: its stack
/// pointer is in no mapping) holds of `lib`; None if nothing.
pub fn held(
    regs: &libc::user_regs_struct,
    stack: Option<&Stack>,
    lib: &Library,
    rules: &mut impl FnMut(u64) -> Result<FrameRules, UnwindError>,
) -> Option<Held> {
    if let Some(v) = ptrace::register_values(regs).into_iter().find(|&a| lib.inside(a)) {
        return Some(Held::Register(v));
    }
    let stack = stack?;
    let words = || stack.words.iter().enumerate().map(|(i, &w)| (stack.lo + 8 * i as u64, w));
    match unwind::walk(regs, stack, rules) {
        Ok(w) => w
            .return_addresses
            .iter()
            .find(|&&a| lib.inside(a))
            .map(|&a| Held::ReturnAddress(a))
            .or_else(|| w.saved.iter().find(|&&(_, v)| lib.inside(v)).map(|&(slot, value)| Held::SavedRegister { slot, value })),
        Err(why) => words().find(|&(_, w)| lib.inside(w)).map(|(slot, value)| Held::StackWord { slot, value, why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::unwind::Rule;

    const RSP: u16 = 7;
    const RA: u16 = 16;
    const LIB: (u64, u64) = (0x5000_0000, 0x5001_0000);

    fn regs(rip: u64, rsp: u64) -> libc::user_regs_struct {
        crate::attach::unwind::tests::regs(rip, rsp, 0, 0)
    }

    /// A thread blocked in a frame (rip 0x1000_0005, CFA = rsp + 32) with
    /// rbx saved at CFA - 16, called from the outermost frame. Word 1 is an
    /// unwritten local: a dead slot.
    fn case(dead: u64, saved_rbx: u64, ret: u64) -> (libc::user_regs_struct, Stack) {
        let lo = 0x7000_0000;
        (regs(0x1000_0005, lo), Stack { lo, words: vec![0, dead, saved_rbx, ret, 0, 0] })
    }

    fn rules(pc: u64) -> Result<FrameRules, UnwindError> {
        match pc {
            0x1000_0005 => Ok(FrameRules { cfa_reg: RSP, cfa_off: 32, regs: vec![(3, Rule::At(-16)), (RA, Rule::At(-8))] }),
            0x2000_000f => Ok(FrameRules { cfa_reg: RSP, cfa_off: 8, regs: vec![(RA, Rule::Undefined)] }),
            _ => Err(UnwindError::NoObject { pc }),
        }
    }

    #[test]
    fn a_dead_slot_in_the_code_does_not_count_and_live_ones_do() {
        let lib = Library::new(vec![LIB]);
        let stale = 0x5000_1234;
        let (r, s) = case(stale, 7, 0x2000_0010);
        assert_eq!(held(&r, Some(&s), &lib, &mut rules), None);
        let (r, s) = case(0, stale, 0x2000_0010);
        assert_eq!(held(&r, Some(&s), &lib, &mut rules), Some(Held::SavedRegister { slot: 0x7000_0010, value: stale }));
        let (mut r, s) = case(0, 7, 0x2000_0010);
        r.r12 = stale;
        assert_eq!(held(&r, Some(&s), &lib, &mut rules), Some(Held::Register(stale)));
        // A return into the library: its frame is live.
        let (r, s) = case(0, 7, 0x5000_2000);
        assert_eq!(held(&r, Some(&s), &lib, &mut |pc| if pc == 0x5000_1fff { rules(0x2000_000f) } else { rules(pc) }), Some(Held::ReturnAddress(0x5000_2000)));
    }

    #[test]
    fn without_cfi_every_word_in_the_code_counts() {
        let lib = Library::new(vec![LIB]);
        let (r, s) = case(0x5000_1234, 7, 0x2000_0010);
        let mut none = |pc| Err(UnwindError::NoObject { pc });
        let why = UnwindError::NoObject { pc: 0x1000_0005 };
        assert_eq!(held(&r, Some(&s), &lib, &mut none), Some(Held::StackWord { slot: 0x7000_0008, value: 0x5000_1234, why }));
        let (r, s) = case(0, 7, 0x2000_0010);
        assert_eq!(held(&r, Some(&s), &lib, &mut none), None);
    }
}
