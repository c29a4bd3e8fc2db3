// u_throw.cpp — allocations around a C++ exception (built -O2
// -fomit-frame-pointer): 2001 in a destructor run while the exception
// unwinds the stack, 2002 in the handler after it was caught.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#define NOINLINE __attribute__((noinline))
static void *volatile keep;

struct Guard {
    NOINLINE ~Guard() { keep = malloc(2001); __asm__ volatile("" ::: "memory"); }
};

NOINLINE void thrower() {
    Guard g;
    throw std::runtime_error("boom");
}

NOINLINE void after_catch() { keep = malloc(2002); __asm__ volatile("" ::: "memory"); }

int main() {
    try {
        thrower();
    } catch (const std::exception &) {
        after_catch();
    }
    std::puts("ok");
    return 0;
}
