//! Writing trace files from Rust, record by record and event by event as
//! the C writer does: for tests, and for `compact`, which writes chunks anew.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::event::{Event, EventKind, Func, Item, UNTIMED};
use super::finish::FINISH_ZSTD_LEVEL;
use super::format::*;
use super::kv::kv_text;
use super::records::{write_record, EndRecord};
use super::varint::{put_svarint, put_varint};

/// Builds one EVENTS chunk the way the C writer does: `first_tsc` is the
/// first event's TSC, `last_tsc` the last one's, `n_events` counts events
/// (not STACK_DEFs), ptr fields chain through the chunk from 0.
#[derive(Debug, Clone)]
pub struct ChunkEncoder {
    tid: u32,
    body: Vec<u8>,
    n_events: u32,
    first_tsc: Option<u64>,
    last_tsc: u64,
    prev_ptr: u64,
}

impl ChunkEncoder {
    pub fn new(tid: u32) -> ChunkEncoder {
        ChunkEncoder {
            tid,
            body: Vec::new(),
            n_events: 0,
            first_tsc: None,
            last_tsc: 0,
            prev_ptr: 0,
        }
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }

    pub fn n_events(&self) -> u32 {
        self.n_events
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Encodes a decoded item (an event's own `tid` is ignored: the chunk's is used).
    pub fn item(&mut self, item: &Item) {
        match item {
            Item::Stack { id, pcs } => self.stack(*id, pcs),
            Item::Event(ev) => self.event(ev),
        }
    }

    /// A STACK_DEF.
    pub fn stack(&mut self, id: u32, pcs: &[u64]) {
        self.body.push(EV_STACK_DEF);
        put_varint(&mut self.body, id as u64);
        put_varint(&mut self.body, pcs.len() as u64);
        let mut prev = 0u64;
        for &pc in pcs {
            put_svarint(&mut self.body, pc.wrapping_sub(prev) as i64);
            prev = pc;
        }
    }

    fn common(&mut self, kind: u8, flags: u8, tsc: u64, cycles: u64, stack: u32) {
        let prev = match self.first_tsc {
            Some(_) => self.last_tsc,
            None => {
                self.first_tsc = Some(tsc);
                tsc
            }
        };
        self.body.push(kind | (flags & EVF_MASK));
        put_varint(&mut self.body, tsc.wrapping_sub(prev));
        // An untimed call is written as 0, as the preload library writes it
        // (the file's header says time_sample > 1).
        put_varint(&mut self.body, if cycles == UNTIMED { 0 } else { cycles });
        put_varint(&mut self.body, stack as u64);
        self.last_tsc = tsc;
        self.n_events += 1;
    }

    fn ptr(&mut self, p: u64) {
        put_svarint(&mut self.body, p.wrapping_sub(self.prev_ptr) as i64);
        self.prev_ptr = p;
    }

    fn v(&mut self, v: u64) {
        put_varint(&mut self.body, v);
    }

    fn sv(&mut self, v: i64) {
        put_svarint(&mut self.body, v);
    }

    /// Encodes a decoded event. calloc and reallocarray are written with
    /// `nmemb = 1` (use [`ChunkEncoder::calloc`] / [`ChunkEncoder::reallocarray`]
    /// for other splits); posix_memalign's `ret` is 0, or ENOMEM when FAILED.
    ///
    /// Panics when an `Alloc`/`Realloc`/`Mmap` carries a `func` of another family.
    pub fn event(&mut self, ev: &Event) {
        let extra = |size: u64, usable: u64| usable.saturating_sub(size);
        let (tsc, cyc, st, fl) = (ev.tsc, ev.cycles, ev.stack, ev.flags);
        match ev.kind {
            EventKind::Alloc {
                func,
                size,
                align,
                ptr,
                usable,
            } => match func {
                Func::Malloc | Func::Valloc | Func::Pvalloc => {
                    let kind = match func {
                        Func::Malloc => EV_MALLOC,
                        Func::Valloc => EV_VALLOC,
                        _ => EV_PVALLOC,
                    };
                    self.common(kind, fl, tsc, cyc, st);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                Func::Calloc => self.calloc(tsc, cyc, st, fl, 1, size, ptr, extra(size, usable)),
                Func::PosixMemalign => {
                    self.common(EV_POSIX_MEMALIGN, fl, tsc, cyc, st);
                    self.v(align);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(if fl & EVF_FAILED != 0 { libc::ENOMEM as u64 } else { 0 });
                    self.v(extra(size, usable));
                }
                Func::AlignedAlloc | Func::Memalign => {
                    let kind = if func == Func::Memalign {
                        EV_MEMALIGN
                    } else {
                        EV_ALIGNED_ALLOC
                    };
                    self.common(kind, fl, tsc, cyc, st);
                    self.v(align);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                f => {
                    let form = f.new_form().unwrap_or_else(|| panic!("EventKind::Alloc cannot carry {}", f.name()));
                    self.common(EV_NEW, fl, tsc, cyc, st);
                    self.v(form);
                    self.v(align);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
            },
            EventKind::Free { func: Func::Free, ptr } => {
                self.common(EV_FREE, fl, tsc, cyc, st);
                self.ptr(ptr);
            }
            EventKind::Free { func, ptr } => {
                let form = func.delete_form().unwrap_or_else(|| panic!("EventKind::Free cannot carry {}", func.name()));
                self.common(EV_DELETE, fl, tsc, cyc, st);
                self.v(form);
                self.ptr(ptr);
            }
            EventKind::UsableSize { ptr, usable } => {
                self.common(EV_USABLE_SIZE, fl, tsc, cyc, st);
                self.ptr(ptr);
                self.v(usable);
            }
            EventKind::Realloc {
                func,
                old,
                size,
                ptr,
                usable,
            } => match func {
                Func::Realloc => {
                    self.common(EV_REALLOC, fl, tsc, cyc, st);
                    self.ptr(old);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                Func::Reallocarray => self.reallocarray(tsc, cyc, st, fl, old, 1, size, ptr, extra(size, usable)),
                f => panic!("EventKind::Realloc cannot carry {}", f.name()),
            },
            EventKind::Mmap {
                func,
                hint,
                len,
                prot,
                flags,
                fd,
                offset,
                result,
            } => {
                let kind = match func {
                    Func::Mmap => EV_MMAP,
                    Func::Mmap64 => EV_MMAP64,
                    f => panic!("EventKind::Mmap cannot carry {}", f.name()),
                };
                self.common(kind, fl, tsc, cyc, st);
                self.ptr(hint);
                self.v(len);
                self.v(prot);
                self.v(flags);
                self.sv(fd);
                self.v(offset);
                self.ptr(result);
            }
            EventKind::Munmap { addr, len, ret } => {
                self.common(EV_MUNMAP, fl, tsc, cyc, st);
                self.ptr(addr);
                self.v(len);
                self.sv(ret);
            }
            EventKind::Mremap {
                old,
                old_len,
                new_len,
                flags,
                result,
            } => {
                self.common(EV_MREMAP, fl, tsc, cyc, st);
                self.ptr(old);
                self.v(old_len);
                self.v(new_len);
                self.v(flags);
                self.ptr(result);
            }
            EventKind::Brk { addr, ret, brk_after } => {
                self.common(EV_BRK, fl, tsc, cyc, st);
                self.ptr(addr);
                self.sv(ret);
                self.ptr(brk_after);
            }
            EventKind::Sbrk {
                increment,
                result,
                brk_after,
            } => {
                self.common(EV_SBRK, fl, tsc, cyc, st);
                self.sv(increment);
                self.ptr(result);
                self.ptr(brk_after);
            }
            EventKind::BrkSeen { brk } => {
                self.common(EV_BRK_SEEN, fl, tsc, cyc, st);
                self.ptr(brk);
            }
            EventKind::ArenaHeap { base, size } => {
                self.common(EV_ARENA_HEAP, fl, tsc, cyc, st);
                self.ptr(base);
                self.v(size);
            }
            EventKind::Sample { func, size, ptr, interval } => {
                self.common(EV_SAMPLE, fl, tsc, cyc, st);
                self.v(func.sample_func().expect("samples come from allocation functions"));
                self.v(size);
                self.ptr(ptr);
                self.v(interval);
            }
            EventKind::SampleFree { ptr } => {
                self.common(EV_SAMPLE_FREE, fl, tsc, cyc, st);
                self.ptr(ptr);
            }
        }
    }

    /// A CALLOC event with its two factors.
    #[allow(clippy::too_many_arguments)]
    pub fn calloc(
        &mut self,
        tsc: u64,
        cycles: u64,
        stack: u32,
        flags: u8,
        nmemb: u64,
        size: u64,
        ptr: u64,
        usable_extra: u64,
    ) {
        self.common(EV_CALLOC, flags, tsc, cycles, stack);
        self.v(nmemb);
        self.v(size);
        self.ptr(ptr);
        self.v(usable_extra);
    }

    /// A REALLOCARRAY event with its two factors.
    #[allow(clippy::too_many_arguments)]
    pub fn reallocarray(
        &mut self,
        tsc: u64,
        cycles: u64,
        stack: u32,
        flags: u8,
        old: u64,
        nmemb: u64,
        size: u64,
        ptr: u64,
        usable_extra: u64,
    ) {
        self.common(EV_REALLOCARRAY, flags, tsc, cycles, stack);
        self.ptr(old);
        self.v(nmemb);
        self.v(size);
        self.ptr(ptr);
        self.v(usable_extra);
    }

    /// Appends raw bytes to the event stream (to build damaged chunks in tests).
    pub fn raw_bytes(&mut self, bytes: &[u8]) {
        self.body.extend_from_slice(bytes);
    }

    /// The 24-byte chunk header.
    pub fn chunk_header(&self) -> [u8; EVENTS_HEADER as usize] {
        let first = self.first_tsc.unwrap_or(0);
        let last = if self.first_tsc.is_some() { self.last_tsc } else { 0 };
        super::records::chunk_header(self.tid, self.n_events, first, last)
    }

    /// The event bytes after the chunk header.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The whole EVENTS payload (chunk header + events), uncompressed.
    pub fn payload(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(EVENTS_HEADER as usize + self.body.len());
        p.extend_from_slice(&self.chunk_header());
        p.extend_from_slice(&self.body);
        p
    }
}

/// Writes a trace file record by record.
pub struct TraceWriter<W: Write> {
    out: W,
    written: u64,
}

impl TraceWriter<BufWriter<File>> {
    /// Creates `path` and writes the header.
    pub fn create<K: AsRef<str>, V: AsRef<str>>(
        path: impl AsRef<Path>,
        header: impl IntoIterator<Item = (K, V)>,
    ) -> io::Result<Self> {
        TraceWriter::new(BufWriter::new(File::create(path)?), header)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header (current format version) from key/value pairs.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(out: W, header: impl IntoIterator<Item = (K, V)>) -> io::Result<Self> {
        TraceWriter::with_version(out, PRELOAD_TRACE_VERSION, header)
    }

    /// Like `new` with any version number (to test version checks).
    pub fn with_version<K: AsRef<str>, V: AsRef<str>>(
        mut out: W,
        version: u32,
        header: impl IntoIterator<Item = (K, V)>,
    ) -> io::Result<Self> {
        let text = kv_text(header);
        out.write_all(&TRACE_MAGIC)?;
        out.write_all(&version.to_le_bytes())?;
        out.write_all(&(text.len() as u32).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        Ok(TraceWriter {
            out,
            written: FILE_HEADER_FIXED as u64 + text.len() as u64,
        })
    }

    /// Any record, payload as given.
    pub fn record(&mut self, ty: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        self.written += write_record(&mut self.out, ty, flags, &[payload])?;
        Ok(())
    }

    /// An uncompressed EVENTS record.
    pub fn chunk(&mut self, chunk: &ChunkEncoder) -> io::Result<()> {
        self.record(REC_EVENTS, 0, &chunk.payload())
    }

    /// An EVENTS record holding `items`, encoded as the C writer does.
    pub fn events_chunk(&mut self, tid: u32, items: &[Item]) -> io::Result<()> {
        let mut c = ChunkEncoder::new(tid);
        for it in items {
            c.item(it);
        }
        self.chunk(&c)
    }

    pub fn maps(&mut self, text: &str) -> io::Result<()> {
        self.record(REC_MAPS, 0, text.as_bytes())
    }

    /// A MAPS record whose whole payload is one zstd frame.
    pub fn maps_compressed(&mut self, text: &str) -> io::Result<()> {
        let c = zstd::bulk::compress(text.as_bytes(), FINISH_ZSTD_LEVEL)?;
        self.record(REC_MAPS, RECORD_FLAG_ZSTD, &c)
    }

    pub fn end(&mut self, end: &EndRecord) -> io::Result<()> {
        self.record(REC_END, 0, &end.to_bytes())
    }

    pub fn runinfo<K: AsRef<str>, V: AsRef<str>>(&mut self, pairs: impl IntoIterator<Item = (K, V)>) -> io::Result<()> {
        self.record(REC_RUNINFO, 0, kv_text(pairs).as_bytes())
    }

    /// Bytes written so far (the offset of the next record).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Flushes and hands back the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

