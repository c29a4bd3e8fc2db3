/*
 * jump_out.c N — a signal handler that longjmps out of an allocator call
 * (jump_hook.c raises the signal inside malloc(12345)), then N malloc/free
 * pairs of 64 bytes in after_jump(). Exit code 0.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>

static sigjmp_buf env;

static void on_usr1(int sig) {
    (void)sig;
    siglongjmp(env, 1);
}

static void *volatile sink;

__attribute__((noinline)) static void after_jump(long n) {
    for (long i = 0; i < n; i++) {
        sink = malloc(64);
        free(sink);
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    signal(SIGUSR1, on_usr1);
    if (!sigsetjmp(env, 1)) {
        sink = malloc(12345); /* does not return: the handler jumps back */
        return 2;
    }
    after_jump(n);
    return 0;
}
