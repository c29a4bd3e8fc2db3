#!/usr/bin/env python3
"""What rounding time stamps to 2^k ticks would save on a finished mtlab
trace: each EVENTS record's stamps rebuilt from its TIME and TIME_REST
streams, rounded down to a multiple of 2^k counted from the record's
first_tsc, and the rounded deltas (in quanta, as varints) compressed alone
(zstd -3, the `zstd` command). docs/benchmarks.md, *Trace size*.

    bench/trace_time_quantum.py TRACE.mtl K [K ...]
"""
import struct
import sys

from trace_streams import N_STREAMS, varint, zstd


def put_varint(out, x):
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)


def main(path, ks):
    b = open(path, "rb").read()
    assert b[:8] == b"MTLABTR\0", "not a trace"
    _, tl = struct.unpack_from("<II", b, 8)
    pos = 16 + tl
    out = {k: bytearray() for k in ks}
    n = 0
    while pos + 8 <= len(b):
        plen, ty, fl = struct.unpack_from("<IHH", b, pos)
        p = b[pos + 8:pos + 8 + plen]
        if ty == 1 and fl & 2:
            first = struct.unpack_from("<Q", p, 8)[0]
            end = plen - (8 if fl & 4 else 0)
            body = zstd(bytes(p[24:end]), "-d")
            i = 1
            step, i = varint(body, i)
            _, i = varint(body, i)
            lens = []
            for _ in range(N_STREAMS[body[0]]):
                ln, i = varint(body, i)
                lens.append(ln)
            t_at, r_at = i + lens[0], i + lens[0] + lens[1]
            t_end, r_end = t_at + lens[1], r_at + lens[2]
            t = first
            stamps = []
            while t_at < t_end:
                q, t_at = varint(body, t_at)
                r, r_at = varint(body, r_at)
                t += q * step + ((r >> 1) ^ -(r & 1))
                stamps.append(t)
            n += len(stamps)
            for k in ks:
                prev = first
                for s in stamps:
                    rounded = first + ((s - first) >> k << k)
                    put_varint(out[k], (rounded - prev) >> k)
                    prev = rounded
        pos += 8 + plen
    print(f"{path}: {n} stamps")
    for k in ks:
        print(f"  k={k:<3} time stream {len(zstd(bytes(out[k]), '-3')):>11} bytes (zstd -3)")


main(sys.argv[1], [int(k) for k in sys.argv[2:]])
