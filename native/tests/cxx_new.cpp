// cxx_new.cpp — every form of C++'s operator new and delete, called by
// name so that the counts do not depend on the compiler's choices (built
// -O0: a new/delete pair may otherwise be left out).
//
// Expected calls (each form is its own function in the per-function table):
//   operator new                    13 (11 of 24 bytes, 2 of 1000 kept live); with
//                                   "throw", 14: one more that throws std::bad_alloc (failed)
//   operator new[]                  12 of 100 bytes
//   operator new(nothrow)           14 (13 of 32 bytes, 1 that fails: failed)
//   operator new[](nothrow)         14 of 200 bytes
//   operator new(align)             15 of 64 bytes, aligned 64
//   operator new[](align)           16 of 128 bytes, aligned 64
//   operator new(align nothrow)     17 of 64 bytes, aligned 128
//   operator new[](align nothrow)   18 of 192 bytes, aligned 64
//   operator delete                  8 (5 blocks and 3 null pointers)
//   operator delete(size)            6
//   operator delete[]                7
//   operator delete[](size)          5
//   operator delete(nothrow)        13
//   operator delete[](nothrow)      14
//   operator delete(align)           8
//   operator delete(size align)      7
//   operator delete[](align)         9
//   operator delete[](size align)    7
//   operator delete(align nothrow)  17
//   operator delete[](align nothrow) 18
// Two 1000-byte blocks stay live; no block is freed that was not allocated.
// "PROG baseline" returns 0 at once: the counts of the runtimes' own calls
// (a heap manager's constructor may call operator new), which a test subtracts.
// Exit code 0, or 1 if an operator misbehaved. ("throw" is not for
// mimalloc: its operator new aborts where it cannot allocate.)
#include <cstdint>
#include <cstring>
#include <new>

static void *volatile sink;

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    void *p[20];
    const std::align_val_t a64{64}, a128{128};
    for (int i = 0; i < 11; i++) p[i] = ::operator new(24);
    for (int i = 0; i < 5; i++) ::operator delete(p[i]);
    for (int i = 5; i < 11; i++) ::operator delete(p[i], 24);
    for (int i = 0; i < 3; i++) ::operator delete(nullptr);
    sink = ::operator new(1000);
    sink = ::operator new(1000);
    if (argc > 1 && strcmp(argv[1], "throw") == 0) {
        try {
            sink = ::operator new(SIZE_MAX / 2);
            return 1;
        } catch (const std::bad_alloc &) {
        }
    }

    for (int i = 0; i < 12; i++) p[i] = ::operator new[](100);
    for (int i = 0; i < 7; i++) ::operator delete[](p[i]);
    for (int i = 7; i < 12; i++) ::operator delete[](p[i], 100);

    for (int i = 0; i < 13; i++) p[i] = ::operator new(32, std::nothrow);
    for (int i = 0; i < 13; i++) ::operator delete(p[i], std::nothrow);
    if (::operator new(SIZE_MAX / 2, std::nothrow) != nullptr) return 1;

    for (int i = 0; i < 14; i++) p[i] = ::operator new[](200, std::nothrow);
    for (int i = 0; i < 14; i++) ::operator delete[](p[i], std::nothrow);

    for (int i = 0; i < 15; i++) p[i] = ::operator new(64, a64);
    for (int i = 0; i < 15; i++)
        if ((uintptr_t)p[i] % 64) return 1;
    for (int i = 0; i < 8; i++) ::operator delete(p[i], a64);
    for (int i = 8; i < 15; i++) ::operator delete(p[i], 64, a64);

    for (int i = 0; i < 16; i++) p[i] = ::operator new[](128, a64);
    for (int i = 0; i < 9; i++) ::operator delete[](p[i], a64);
    for (int i = 9; i < 16; i++) ::operator delete[](p[i], 128, a64);

    for (int i = 0; i < 17; i++) p[i] = ::operator new(64, a128, std::nothrow);
    for (int i = 0; i < 17; i++)
        if ((uintptr_t)p[i] % 128) return 1;
    for (int i = 0; i < 17; i++) ::operator delete(p[i], a128, std::nothrow);

    for (int i = 0; i < 18; i++) p[i] = ::operator new[](192, a64, std::nothrow);
    for (int i = 0; i < 18; i++) ::operator delete[](p[i], a64, std::nothrow);
    return 0;
}
