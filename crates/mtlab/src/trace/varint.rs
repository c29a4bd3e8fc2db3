//! LEB128 varints, plain and zigzag: what every value in an EVENTS chunk
//! is written as, by the C writer, `ChunkEncoder` and the column layout.

use super::fields::DecErr;

/// Appends an unsigned LEB128 varint.
#[inline]
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a zigzag-encoded signed varint.
#[inline]
pub fn put_svarint(buf: &mut Vec<u8>, v: i64) {
    put_varint(buf, to_zigzag(v));
}

/// The zigzag of a signed value: small magnitudes, either sign, stay small.
#[inline(always)]
pub(crate) fn to_zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Undoes the zigzag of a signed varint.
#[inline(always)]
pub(crate) fn zigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

#[inline(never)]
#[cold]
fn varint_slow(buf: &[u8], pos: &mut usize) -> Result<u64, DecErr> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    let mut p = *pos;
    loop {
        let Some(&b) = buf.get(p) else { return Err(DecErr::Eof) };
        p += 1;
        if shift == 63 && b > 1 {
            return Err(DecErr::VarintOverflow);
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            *pos = p;
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(DecErr::VarintOverflow);
        }
    }
}

#[inline(always)]
pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecErr> {
    match buf.get(*pos) {
        Some(&b) if b < 0x80 => {
            *pos += 1;
            Ok(b as u64)
        }
        _ => varint2(buf, pos),
    }
}

#[inline(always)]
fn varint2(buf: &[u8], pos: &mut usize) -> Result<u64, DecErr> {
    // Unrolled when 10 bytes are there to read; the checked loop near the end.
    let p = *pos;
    if let Some(s) = buf.get(p..p + 10) {
        let s: &[u8; 10] = s.try_into().unwrap();
        let mut v: u64 = 0;
        for (i, &b) in s.iter().enumerate().take(9) {
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                *pos = p + i + 1;
                return Ok(v);
            }
        }
        let b = s[9];
        if b > 1 {
            return Err(DecErr::VarintOverflow);
        }
        *pos = p + 10;
        return Ok(v | (b as u64) << 63);
    }
    varint_slow(buf, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut buf = Vec::new();
        let vals = [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &v in &vals {
            put_varint(&mut buf, v);
        }
        let mut p = 0;
        for &v in &vals {
            assert_eq!(varint(&buf, &mut p).unwrap(), v);
        }
        assert_eq!(p, buf.len());
        assert!(matches!(varint(&buf, &mut p), Err(DecErr::Eof)));
        let bad = [0xffu8; 11];
        let mut p = 0;
        assert!(matches!(varint(&bad, &mut p), Err(DecErr::VarintOverflow)));
        let bad = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut p = 0;
        assert!(matches!(varint(&bad, &mut p), Err(DecErr::VarintOverflow)));
        // Every length from 1 to 10 bytes, at three offsets, the last values
        // with fewer than 10 bytes left behind them (the checked loop).
        let mut vals = vec![0u64, u64::MAX];
        for bits in 1..64 {
            vals.extend([(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) | 0x55 | (1 << (bits / 2))]);
        }
        for skip in 0..3 {
            let mut buf = vec![0x80u8; skip];
            for &v in &vals {
                put_varint(&mut buf, v);
            }
            let mut p = skip;
            for &v in &vals {
                assert_eq!(varint(&buf, &mut p).unwrap(), v, "{v:#x} after {skip}");
            }
            assert_eq!(p, buf.len());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -123456789] {
            let mut b = Vec::new();
            put_svarint(&mut b, v);
            let mut p = 0;
            assert_eq!(zigzag(varint(&b, &mut p).unwrap()), v);
        }
    }
}
