#!/usr/bin/env python3
"""Where a finished mtlab trace's bytes go: each column stream of its EVENTS
chunks compressed alone (zstd -3, the `zstd` command), and the other records.
docs/benchmarks.md, *Trace size*.

    bench/trace_streams.py TRACE.mtl [...]
"""
import struct
import subprocess
import sys

NAMES = ["kind", "time", "time_rest", "cycles", "cycles_rest", "stack", "size",
         "alloc_code", "free_code", "ptr_delta", "extra", "misc", "stack_defs",
         "alloc_delta", "free_delta", "cycles_skip", "free_seq", "time_skip"]
N_STREAMS = {1: 13, 2: 15, 3: 16, 4: 18, 5: 18, 6: 18, 7: 18, 8: 18}


def varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return x, i


def zstd(data, *args):
    return subprocess.run(["zstd", "-q", "-c", *args], input=data, capture_output=True, check=True).stdout


def main(path):
    b = open(path, "rb").read()
    assert b[:8] == b"MTLABTR\0", "not a trace"
    version, tl = struct.unpack_from("<II", b, 8)
    pos = 16 + tl
    streams = {n: bytearray() for n in NAMES}
    other = {"header": pos, "rows (events not in columns)": 0, "chunk headers+crc": 0}
    comp_streams = 0
    draws = {}
    while pos + 8 <= len(b):
        plen, ty, fl = struct.unpack_from("<IHH", b, pos)
        p = b[pos + 8:pos + 8 + plen]
        if ty == 1 and fl & 2:
            end = plen - (8 if fl & 4 else 0)
            body = zstd(bytes(p[24:end]), "-d")
            other["chunk headers+crc"] += 8 + 24 + (plen - end)
            comp_streams += end - 24
            layout = body[0]
            i = 1
            if layout >= 4:
                _, i = varint(body, i)  # place in the thread's chain
            _, i = varint(body, i)
            _, i = varint(body, i)
            if layout >= 5:  # the timing draws' state at the record's start
                mode, i = varint(body, i)
                if mode == 2:
                    _, i = varint(body, i)
                    i += 8
                    _, i = varint(body, i)
                draws[mode] = draws.get(mode, 0) + 1
            lens = []
            for _ in range(N_STREAMS[layout]):
                n, i = varint(body, i)
                lens.append(n)
            for k, n in enumerate(lens):
                streams[NAMES[k]] += body[i:i + n]
                i += n
        else:
            name = {1: "rows (events not in columns)", 2: "MAPS", 3: "END", 4: "RUNINFO", 5: "STATS"}.get(ty, "other")
            other[name] = other.get(name, 0) + 8 + plen
        pos += 8 + plen
    print(f"{path}: {len(b)} bytes, version {version}; EVENTS column bodies {comp_streams} bytes compressed")
    if draws:
        modes = {0: "unknown", 1: "every call timed", 2: "replayed"}
        print("  records by timing draws: " + ", ".join(f"{modes.get(m, m)} {n}" for m, n in sorted(draws.items())))
    sizes = {n: len(zstd(bytes(s), "-3")) if s else 0 for n, s in streams.items()}
    tot = sum(sizes.values()) or 1
    print(f"  {'stream':<14} {'raw':>11} {'zstd alone':>11} {'share':>6}")
    for n in NAMES:
        if streams[n]:
            print(f"  {n:<14} {len(streams[n]):>11} {sizes[n]:>11} {100 * sizes[n] / tot:>5.1f}%")
    for k, v in other.items():
        print(f"  {k:<14} {v:>11}")


if __name__ == "__main__":
    for a in sys.argv[1:]:
        main(a)
