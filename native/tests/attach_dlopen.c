/* A process to attach to (tests/attach.rs) that loads a library after the
 * attach, so its calls are known exactly:
 *
 *   "ready"; on SIGUSR1: dlopen(argv[1]) (a path to libattach_dlopen_lib.so)
 *   and its lib_allocate() (40 x malloc(200) by the library's code, 15 of
 *   them freed); "phase 1 done SUM"; on SIGUSR1: lib_allocate() again
 *   (after the detach), "phase 2 done SUM", exit 0. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>

static void wait_usr1(const sigset_t *usr1) {
    int sig;
    sigwait(usr1, &sig);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");

    wait_usr1(&usr1);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) return 3;
    unsigned long (*lib_allocate)(void) = (unsigned long (*)(void))dlsym(lib, "lib_allocate");
    if (!lib_allocate) return 4;
    printf("phase 1 done %lu\n", lib_allocate());

    wait_usr1(&usr1);
    printf("phase 2 done %lu\n", lib_allocate());
    return 0;
}
