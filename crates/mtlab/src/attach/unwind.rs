//! The live frames of a stopped thread of another process, unwound with the
//! call frame information (.eh_frame) of the files mapped there: the return
//! addresses a `ret` will still jump to and the stack slots a function's
//! epilogue will still restore a register from. The unload check at detach
//! needs exactly these: a dead slot (an unwritten local that still holds
//! what a deeper, finished call wrote there) is never jumped to.
//!
//! Strict on purpose: what it cannot follow exactly (an address in no file,
//! a file without .eh_frame, a CFA or a register given by a DWARF
//! expression, a signal frame, a slot off the stack, a frame that does not
//! move up the stack, too many frames) is an error, and the caller falls
//! back to treating every stack word as live. framehop unwinds from
//! registers and a memory callback too, but restores rip, rsp and rbp only
//! (it never reports where rbx or r12-r15 were saved) and falls back to
//! frame pointers where the CFI fails: both wrong for a safety check.

use std::collections::HashMap;
use std::rc::Rc;

use gimli::{BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
use object::{Object, ObjectSection, ObjectSegment};

use super::target::{self, Mapping};

/// Deeper than any real stack mtlab has met; past it the walk is distrusted.
pub const MAX_FRAMES: usize = 1024;
/// DWARF numbers of x86-64 (System V ABI, figure 3.36).
const RSP: u16 = 7;
const RA: u16 = 16;
/// rbx, rbp, r12-r15: preserved across calls, so one a frame has no rule
/// for holds in the caller what it holds here.
const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnwindError {
    #[error("{pc:#x} is in no mapped file")]
    NoObject { pc: u64 },
    #[error("cannot read {path}: {why}")]
    File { path: String, why: String },
    #[error("{path} has no .eh_frame")]
    NoCfi { path: String },
    #[error("{pc:#x} is in no loaded segment of {path}")]
    NoSegment { pc: u64, path: String },
    #[error("no CFI of {path} covers {pc:#x}")]
    NoFde { pc: u64, path: String },
    #[error("the CFI of {path} at {pc:#x} cannot be read: {why}")]
    BadCfi { pc: u64, path: String, why: gimli::Error },
    #[error("{pc:#x} is in a signal frame")]
    SignalFrame { pc: u64 },
    #[error("the rule for {what} at {pc:#x} is not followed (a DWARF expression or an unknown register)")]
    Unsupported { pc: u64, what: String },
    #[error("slot {addr:#x} is off the stack")]
    OffStack { addr: u64 },
    #[error("the frame at {pc:#x} does not move up the stack")]
    NotUpward { pc: u64 },
    #[error("the frame at {pc:#x} returns to 0")]
    ZeroReturn { pc: u64 },
    #[error("more than {MAX_FRAMES} frames")]
    TooDeep,
}

/// The words of a thread's stack from its stack pointer to the top of the
/// stack's mapping, read once while it is stopped.
pub struct Stack {
    pub lo: u64,
    pub words: Vec<u64>,
}

impl Stack {
    pub fn word(&self, addr: u64) -> Result<u64, UnwindError> {
        let i = addr.checked_sub(self.lo).filter(|o| o % 8 == 0).map(|o| (o / 8) as usize);
        i.and_then(|i| self.words.get(i).copied()).ok_or(UnwindError::OffStack { addr })
    }

    fn hi(&self) -> u64 {
        self.lo + 8 * self.words.len() as u64
    }
}

/// How the caller's value of a register is found, from one row of CFI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Undefined,
    Same,
    /// Saved in the slot at CFA + n.
    At(i64),
    /// Is CFA + n.
    Is(i64),
    /// Is in that register.
    In(u16),
}

/// One frame's CFI row: the CFA as a register plus an offset, and the
/// registers that have a rule other than their default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRules {
    pub cfa_reg: u16,
    pub cfa_off: i64,
    pub regs: Vec<(u16, Rule)>,
}

impl FrameRules {
    fn rule(&self, reg: u16) -> Rule {
        match self.regs.iter().find(|(r, _)| *r == reg) {
            Some(&(_, rule)) => rule,
            None if reg == RSP => Rule::Is(0), // x86-64: the CFA is the caller's rsp
            None if CALLEE_SAVED.contains(&reg) => Rule::Same,
            None => Rule::Undefined,
        }
    }
}

/// What the live frames hold: the return addresses, innermost first, and
/// every slot where a frame saved a register (slot address, value).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Walk {
    pub return_addresses: Vec<u64>,
    pub saved: Vec<(u64, u64)>,
}

/// Registers by DWARF number (0-16, rip as 16); None where unknown.
type Regs = [Option<u64>; 17];

fn dwarf_regs(r: &libc::user_regs_struct) -> Regs {
    [r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip].map(Some)
}

/// Unwinds from `regs` to the outermost frame (the one whose return address
/// is undefined: `_start`, a thread's start in clone), `rules` giving the
/// CFI row for an address (rip for the first frame, return address - 1 for
/// the others: a call may be a function's last instruction).
pub fn walk(
    regs: &libc::user_regs_struct,
    stack: &Stack,
    rules: &mut impl FnMut(u64) -> Result<FrameRules, UnwindError>,
) -> Result<Walk, UnwindError> {
    let mut regs = dwarf_regs(regs);
    let mut out = Walk::default();
    for depth in 0..MAX_FRAMES {
        let pc = regs[RA as usize].expect("set on every step");
        let row = rules(if depth == 0 { pc } else { pc - 1 })?;
        match step(&row, &regs, stack, pc, &mut out.saved)? {
            None => return Ok(out),
            Some(caller) => {
                regs = caller;
                out.return_addresses.push(regs[RA as usize].expect("checked by step"));
            }
        }
    }
    Err(UnwindError::TooDeep)
}

/// The caller's registers from this frame's `row` (None: this frame is the
/// outermost); each slot a register is restored from goes to `saved`.
fn step(row: &FrameRules, regs: &Regs, stack: &Stack, pc: u64, saved: &mut Vec<(u64, u64)>) -> Result<Option<Regs>, UnwindError> {
    if row.rule(RA) == Rule::Undefined {
        return Ok(None);
    }
    let unsupported = |what: String| UnwindError::Unsupported { pc, what };
    let base = regs.get(row.cfa_reg as usize).copied().flatten().ok_or_else(|| unsupported(format!("the CFA (register {})", row.cfa_reg)))?;
    let cfa = base.wrapping_add_signed(row.cfa_off);
    let sp = regs[RSP as usize].ok_or_else(|| unsupported("rsp".into()))?;
    if cfa <= sp || cfa > stack.hi() {
        return Err(UnwindError::NotUpward { pc });
    }
    // Slots of registers not tracked (vector registers) are live all the same.
    for &(reg, rule) in &row.regs {
        if let (Rule::At(n), false) = (rule, (reg as usize) < regs.len()) {
            let slot = cfa.wrapping_add_signed(n);
            saved.push((slot, stack.word(slot)?));
        }
    }
    let mut caller: Regs = [None; 17];
    for (reg, value) in caller.iter_mut().enumerate() {
        *value = match row.rule(reg as u16) {
            Rule::Undefined => None,
            Rule::Same => regs[reg],
            Rule::Is(n) => Some(cfa.wrapping_add_signed(n)),
            Rule::In(r) => regs.get(r as usize).copied().flatten(),
            Rule::At(n) => {
                let slot = cfa.wrapping_add_signed(n);
                let v = stack.word(slot)?;
                if reg != RA as usize {
                    saved.push((slot, v));
                }
                Some(v)
            }
        };
    }
    match caller[RA as usize] {
        None => Err(unsupported("the return address".into())),
        Some(0) => Err(UnwindError::ZeroReturn { pc }),
        Some(_) if caller[RSP as usize].is_none_or(|s| s <= sp) => Err(UnwindError::NotUpward { pc }),
        Some(_) => Ok(Some(caller)),
    }
}

/// The CFI of one ELF file: its .eh_frame (and the search table of
/// .eh_frame_hdr) with their addresses, and its loaded segments to turn a
/// file offset into the address the CFI speaks of.
struct FileCfi {
    path: String,
    eh_frame: Vec<u8>,
    eh_frame_at: u64,
    hdr: Option<(Vec<u8>, u64)>,
    text_at: u64,
    /// PT_LOAD segments: file offset, size in the file, address.
    loads: Vec<(u64, u64, u64)>,
}

impl FileCfi {
    fn parse(path: &str, data: &[u8]) -> Result<FileCfi, UnwindError> {
        let bad = |why: String| UnwindError::File { path: path.to_string(), why };
        let file = object::File::parse(data).map_err(|e| bad(e.to_string()))?;
        let section = |name: &str| file.section_by_name(name).and_then(|s| Some((s.data().ok()?.to_vec(), s.address())));
        let (eh_frame, eh_frame_at) = section(".eh_frame").ok_or_else(|| UnwindError::NoCfi { path: path.to_string() })?;
        let loads = file.segments().filter_map(|s| Some((s.file_range().0, s.file_range().1, s.address())).filter(|l| l.1 > 0)).collect();
        Ok(FileCfi {
            path: path.to_string(),
            eh_frame,
            eh_frame_at,
            hdr: section(".eh_frame_hdr"),
            text_at: file.section_by_name(".text").map(|s| s.address()).unwrap_or(0),
            loads,
        })
    }

    /// The address in the file's own terms of the byte at `offset` in it.
    fn address_of(&self, offset: u64) -> Option<u64> {
        self.loads.iter().find(|&&(off, size, _)| offset >= off && offset < off + size).map(|&(off, _, at)| at + (offset - off))
    }

    /// The CFI row that covers `address` (the file's own address).
    fn rules(&self, address: u64, pc: u64) -> Result<FrameRules, UnwindError> {
        let bad = |why: gimli::Error| match why {
            gimli::Error::NoUnwindInfoForAddress => UnwindError::NoFde { pc, path: self.path.clone() },
            why => UnwindError::BadCfi { pc, path: self.path.clone(), why },
        };
        let mut bases = BaseAddresses::default().set_eh_frame(self.eh_frame_at).set_text(self.text_at);
        let mut eh_frame = EhFrame::new(&self.eh_frame, LittleEndian);
        eh_frame.set_address_size(8);
        let table = match &self.hdr {
            Some((hdr, at)) => {
                bases = bases.set_eh_frame_hdr(*at);
                Some(EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).map_err(bad)?)
            }
            None => None,
        };
        let fde = match table.as_ref().and_then(|t| t.table()) {
            Some(t) => t.fde_for_address(&eh_frame, &bases, address, EhFrame::cie_from_offset),
            None => eh_frame.fde_for_address(&bases, address, EhFrame::cie_from_offset),
        }
        .map_err(bad)?;
        if fde.is_signal_trampoline() {
            return Err(UnwindError::SignalFrame { pc });
        }
        let mut ctx = UnwindContext::new();
        let row = fde.unwind_info_for_address(&eh_frame, &bases, &mut ctx, address).map_err(bad)?;
        let unsupported = |what: String| UnwindError::Unsupported { pc, what };
        let (cfa_reg, cfa_off) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => (register.0, *offset),
            CfaRule::Expression(_) => return Err(unsupported("the CFA".into())),
        };
        let mut regs = Vec::new();
        for (reg, rule) in row.registers() {
            let rule = match rule {
                RegisterRule::Undefined => Rule::Undefined,
                RegisterRule::SameValue => Rule::Same,
                RegisterRule::Offset(n) => Rule::At(*n),
                RegisterRule::ValOffset(n) => Rule::Is(*n),
                RegisterRule::Register(r) => Rule::In(r.0),
                _ => return Err(unsupported(format!("register {}", reg.0))),
            };
            regs.push((reg.0, rule));
        }
        Ok(FrameRules { cfa_reg, cfa_off, regs })
    }
}

/// The CFI of the files mapped in one process, each file read once (an
/// unreadable one is remembered as such): the unload check runs up to a
/// hundred times.
pub struct CfiFiles {
    pid: i32,
    files: HashMap<String, Result<Rc<FileCfi>, UnwindError>>,
}

impl CfiFiles {
    pub fn new(pid: i32) -> CfiFiles {
        CfiFiles { pid, files: HashMap::new() }
    }

    /// The CFI row for `pc`, an address in the process with `maps`.
    pub fn rules(&mut self, maps: &[Mapping], pc: u64) -> Result<FrameRules, UnwindError> {
        let m = maps
            .iter()
            .find(|m| pc >= m.start && pc < m.end && m.perms.contains('x') && m.path.starts_with('/'))
            .ok_or(UnwindError::NoObject { pc })?;
        let file = self.file(&m.path)?;
        let address = file.address_of(pc - m.start + m.offset).ok_or_else(|| UnwindError::NoSegment { pc, path: m.path.clone() })?;
        file.rules(address, pc)
    }

    fn file(&mut self, map_path: &str) -> Result<Rc<FileCfi>, UnwindError> {
        let pid = self.pid;
        self.files
            .entry(map_path.to_string())
            .or_insert_with(|| {
                // A file replaced since it was mapped is not the file mapped.
                if map_path.ends_with(" (deleted)") {
                    return Err(UnwindError::File { path: map_path.to_string(), why: "deleted since it was mapped".into() });
                }
                let here = target::in_root(pid, &target::seen_there(pid, map_path));
                let data = std::fs::read(&here).map_err(|e| UnwindError::File { path: map_path.to_string(), why: e.to_string() })?;
                FileCfi::parse(map_path, &data).map(Rc::new)
            })
            .clone()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::attach::ptrace::Tracee;

    /// Registers with these four set and the rest 0 (quiet.rs's tests too).
    pub(in crate::attach) fn regs(rip: u64, rsp: u64, rbp: u64, rbx: u64) -> libc::user_regs_struct {
        // SAFETY: user_regs_struct is plain integers; all-zero is a valid value.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        (r.rip, r.rsp, r.rbp, r.rbx) = (rip, rsp, rbp, rbx);
        r
    }

    /// A function that pushed rbx and rbp (CFA = rsp + 24), called by one
    /// with a frame pointer (CFA = rbp + 16, rbp saved at CFA - 16), called
    /// by the outermost frame. Dead slots below rsp and between the frames
    /// are not in the walk.
    #[test]
    fn the_walk_follows_the_rules_and_reports_live_slots_only() {
        let lo = 0x7000_0000u64;
        let mut words = vec![0xdead_u64; 16];
        // leaf: rsp = lo; [lo+0] rbx saved, [lo+8] rbp saved, [lo+16] return address; CFA = lo + 24
        words[0] = 0xb0b0; // the caller's rbx
        words[1] = lo + 0x48; // the caller's rbp
        words[2] = 0x2000_0010; // into the middle frame
        // middle: rsp = lo + 24; rbp = lo + 0x48; CFA = rbp + 16 = lo + 0x58
        words[9] = lo + 0x70; // [CFA-16]: outer rbp
        words[10] = 0x3000_0020; // [CFA-8]: return into the outermost frame
        let stack = Stack { lo, words };
        let mut rules = |pc: u64| -> Result<FrameRules, UnwindError> {
            Ok(match pc {
                0x1000_0005 => FrameRules { cfa_reg: RSP, cfa_off: 24, regs: vec![(3, Rule::At(-24)), (6, Rule::At(-16)), (RA, Rule::At(-8))] },
                0x2000_000f => FrameRules { cfa_reg: 6, cfa_off: 16, regs: vec![(6, Rule::At(-16)), (RA, Rule::At(-8))] },
                0x3000_001f => FrameRules { cfa_reg: RSP, cfa_off: 8, regs: vec![(RA, Rule::Undefined)] },
                _ => return Err(UnwindError::NoObject { pc }),
            })
        };
        let w = walk(&regs(0x1000_0005, lo, 0x1111, 0x2222), &stack, &mut rules).unwrap();
        assert_eq!(w.return_addresses, vec![0x2000_0010, 0x3000_0020]);
        assert_eq!(w.saved, vec![(lo, 0xb0b0), (lo + 8, lo + 0x48), (lo + 0x48, lo + 0x70)]);
        // The same stack with the outermost frame's CFI missing: an error, never a shorter walk.
        let mut partial = |pc: u64| if pc == 0x3000_001f { Err(UnwindError::NoObject { pc }) } else { rules(pc) };
        assert_eq!(walk(&regs(0x1000_0005, lo, 0x1111, 0x2222), &stack, &mut partial), Err(UnwindError::NoObject { pc: 0x3000_001f }));
    }

    #[test]
    fn frames_that_do_not_move_up_slots_off_the_stack_and_endless_walks_are_errors() {
        let lo = 0x7000_0000u64;
        let stack = Stack { lo, words: vec![0x1000_0001; 4] };
        let r = regs(0x1000_0001, lo, 0, 0);
        let mut down = |_| Ok(FrameRules { cfa_reg: RSP, cfa_off: 0, regs: vec![(RA, Rule::At(-8))] });
        assert_eq!(walk(&r, &stack, &mut down), Err(UnwindError::NotUpward { pc: 0x1000_0001 }));
        let mut off = |_| Ok(FrameRules { cfa_reg: RSP, cfa_off: 8, regs: vec![(RA, Rule::At(-16))] });
        assert_eq!(walk(&r, &stack, &mut off), Err(UnwindError::OffStack { addr: lo - 8 }));
        let mut beyond = |_| Ok(FrameRules { cfa_reg: RSP, cfa_off: 64, regs: vec![(RA, Rule::At(-8))] });
        assert_eq!(walk(&r, &stack, &mut beyond), Err(UnwindError::NotUpward { pc: 0x1000_0001 }));
        // rax is known in the first frame only: a caller's CFA on it is not followed.
        let mut twice = |pc: u64| {
            Ok(if pc == 0x1000_0001 {
                FrameRules { cfa_reg: RSP, cfa_off: 8, regs: vec![(RA, Rule::At(-8))] }
            } else {
                FrameRules { cfa_reg: 0, cfa_off: 8, regs: vec![(RA, Rule::At(-8))] }
            })
        };
        assert!(matches!(walk(&r, &stack, &mut twice), Err(UnwindError::Unsupported { .. })));
    }

    /// A real program (coreutils' sleep, blocked in clock_nanosleep inside
    /// libc), stopped and unwound with the CFI of its files: the walk reaches
    /// `_start` through libc's and the program's frames, and every return
    /// address lies in an executable mapping of a file.
    #[test]
    fn a_sleeping_program_unwinds_to_its_start() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let blocked = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            crate::attach::ptrace::blocked_in(pid, pid).is_some()
        });
        assert!(blocked, "sleep did not block");
        let maps = target::maps(pid).unwrap();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap().to_string_lossy().into_owned();
        let t = Tracee::stop_one(pid, pid).unwrap();
        let (_, r) = t.regs().next().unwrap();
        let m = maps.iter().find(|m| r.rsp >= m.start && r.rsp < m.end).unwrap();
        let stack = Stack { lo: r.rsp, words: t.read_u64s(r.rsp, ((m.end - r.rsp) / 8) as usize).unwrap() };
        let mut files = CfiFiles::new(pid);
        let w = walk(r, &stack, &mut |pc| files.rules(&maps, pc));
        drop(t);
        child.kill().unwrap();
        child.wait().unwrap();
        let w = w.unwrap();
        assert!(w.return_addresses.len() >= 3, "libc's sleep, main, libc's start: {w:?}");
        let mapped = |a: u64| maps.iter().any(|m| a >= m.start && a < m.end && m.perms.contains('x') && m.path.starts_with('/'));
        assert!(w.return_addresses.iter().all(|&a| mapped(a)), "{w:?}");
        // The last return is into the program's own `_start` (its file, not libc's).
        let last = *w.return_addresses.last().unwrap();
        assert!(maps.iter().any(|m| m.path == exe && last >= m.start && last < m.end), "{last:#x} is not in {exe}: {w:?}");
    }
}
