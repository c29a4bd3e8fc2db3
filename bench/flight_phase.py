# The program of bench/flight_window.sh: idle for IDLE seconds (start-up
# leaves the flight recorder's window), then one known phase whose heap calls
# the counting shim counts, printed as one line; then idle until the dump.
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
idle = float(sys.argv[2])
c = {k: ctypes.c_uint64.in_dll(lib, "count_" + k) for k in ("malloc", "calloc", "realloc", "free", "bytes")}
def snap(): return {k: v.value for k, v in c.items()}
time.sleep(idle)
a = snap()
x = [str(i) * 200 for i in range(100000)]  # 100 k strings of 200-1000 B: above pymalloc's 512 B, so malloc
del x
b = snap()
print({k: b[k] - a[k] for k in a}, flush=True)
time.sleep(6)
