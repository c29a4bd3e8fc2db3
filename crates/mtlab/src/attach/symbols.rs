//! Addresses of exported functions in a shared object mapped into another
//! process: the object's dynamic symbol table, read from its file, plus the
//! address it is loaded at.

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Endianness, Object, ObjectSymbol};

/// The dynamic symbols `names` of the ELF file `data`, as offsets from the
/// address its first PT_LOAD segment is mapped at (a shared object's base in
/// /proc/PID/maps); None for a name it does not define.
pub fn exported(data: &[u8], names: &[&str]) -> Result<Vec<Option<u64>>, String> {
    let elf = ElfFile64::<Endianness>::parse(data).map_err(|e| format!("not a 64-bit ELF file: {e}"))?;
    let endian = elf.endian();
    let first_load = elf
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| p.p_vaddr(endian) & !0xfff)
        .min()
        .unwrap_or(0);
    let mut out = vec![None; names.len()];
    for sym in elf.dynamic_symbols() {
        if !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        // "dlopen@@GLIBC_2.34": the default version is what the name is.
        if let Some(i) = names.iter().position(|n| *n == name) {
            out[i].get_or_insert(sym.address() - first_load);
        }
    }
    Ok(out)
}

/// Whether the ELF file `data` asks for a dynamic loader (PT_INTERP) or is a
/// shared object; a static executable has neither a loader nor dlopen.
pub fn is_dynamic(data: &[u8]) -> Option<bool> {
    let header = object::elf::FileHeader64::<Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let phdrs = header.program_headers(endian, data).ok()?;
    Some(phdrs.iter().any(|p| p.p_type(endian) == object::elf::PT_INTERP || p.p_type(endian) == object::elf::PT_DYNAMIC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_exports_dlopen_and_the_library_its_entry_points() {
        let lib = std::fs::read(crate::native::path(crate::native::Part::Attach).unwrap()).unwrap();
        let got = exported(&lib, &["mtlab_attach_begin", "mtlab_attach_end", "no_such_function"]).unwrap();
        assert!(got[0].is_some() && got[1].is_some() && got[0] != got[1]);
        assert_eq!(got[2], None);
        assert_eq!(is_dynamic(&lib), Some(true));
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert_eq!(is_dynamic(&me), Some(true));
    }
}
