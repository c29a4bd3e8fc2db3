# A Python program to attach to (tests/attach.rs): "ready"; on SIGUSR1,
# 20 000 bytes objects of 5000 bytes (each a malloc of the interpreter:
# larger than pymalloc's 512-byte limit), 5000 of them dropped (free);
# "phase 1 done M F" where M and F are the malloc and free calls a counting
# library preloaded from the start saw meanwhile (0 0 without one); on
# SIGUSR1, "phase 2 done" and exit 0.
import ctypes
import signal

S = signal.SIGUSR1
signal.pthread_sigmask(signal.SIG_BLOCK, [S])
try:
    count = ctypes.CDLL(None).count_read
    count.restype = ctypes.c_ulong
except AttributeError:
    def count(which):
        return 0
print("ready", flush=True)
signal.sigwait([S])
m0, f0 = count(0), count(1)
n = 5000
keep = [b"x" * n for _ in range(20000)]
del keep[:5000]
m1, f1 = count(0), count(1)
print("phase 1 done", m1 - m0, f1 - f0, flush=True)
signal.sigwait([S])
print("phase 2 done", flush=True)
