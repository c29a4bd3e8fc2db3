/* A malloc between mtlab and glibc's (linked by jump_out.c, so found by
 * mtlab's RTLD_NEXT lookup): a request of exactly 12345 bytes raises SIGUSR1,
 * whose handler longjmps out of the allocator call mtlab is timing. */
#include <signal.h>
#include <stddef.h>

void *__libc_malloc(size_t);

void *malloc(size_t n) {
    if (n == 12345) raise(SIGUSR1);
    return __libc_malloc(n);
}
