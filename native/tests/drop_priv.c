/*
 * drop_priv.c MODE N — what daemons do before their first allocations are
 * flushed: MODE "setuid" becomes user nobody (65534); MODE "chroot" chroots
 * into the directory given as $DROP_ROOT. Then N malloc/free pairs of 80
 * bytes in after_drop(). Needs root. Exit code 0; 2 when the drop failed.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void after_drop(long n) {
    for (long i = 0; i < n; i++) {
        sink = malloc(80);
        free(sink);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    if (strcmp(argv[1], "setuid") == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) return 2;
    } else {
        const char *root = getenv("DROP_ROOT");
        if (!root || chroot(root) != 0 || chdir("/") != 0) return 2;
    }
    after_drop(atol(argv[2]));
    return 0;
}
