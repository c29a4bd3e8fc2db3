/*
 * u_places.c — allocations from the places where stack walking is hard, each
 * of a size no other allocation has, so a test finds its site by bytes.
 * Built with -O2 -fomit-frame-pointer (no frame pointers, as distributions
 * build), with u_plugin.c as a shared library beside it (argv[1]).
 *
 *   1001  main → nofp_a → nofp_b → nofp_c → malloc
 *   1002  main → call_plugin → plugin_outer → plugin_inner → malloc (dlopen'd;
 *         the first copy is dlclose'd, then the plugin is loaded again: 1003)
 *   1004  main → sig_outer → raise → [signal frame] → on_signal → malloc
 *   1005  thread: start_thread → worker_start → worker → malloc
 *   1006  main → run_jit → [anonymous executable code] → jit_target → malloc
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NOINLINE __attribute__((noinline))
static void *volatile keep;

NOINLINE void nofp_c(void) { keep = malloc(1001); __asm__ volatile("" ::: "memory"); }
NOINLINE void nofp_b(void) { nofp_c(); __asm__ volatile("" ::: "memory"); }
NOINLINE void nofp_a(void) { nofp_b(); __asm__ volatile("" ::: "memory"); }

NOINLINE int call_plugin(const char *path, size_t size) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", path, dlerror()); return -1; }
    void (*outer)(size_t) = (void (*)(size_t))dlsym(h, "plugin_outer");
    if (!outer) return -1;
    outer(size);
    __asm__ volatile("" ::: "memory");
    return size == 1002 ? dlclose(h) : 0; /* the second copy stays: its frames are named */
}

NOINLINE void on_signal(int sig) { (void)sig; keep = malloc(1004); __asm__ volatile("" ::: "memory"); }
NOINLINE void sig_outer(void) { raise(SIGUSR1); __asm__ volatile("" ::: "memory"); }

NOINLINE void worker(void) { keep = malloc(1005); __asm__ volatile("" ::: "memory"); }
NOINLINE void *worker_start(void *arg) { worker(); __asm__ volatile("" ::: "memory"); return arg; }

NOINLINE void jit_target(void) { keep = malloc(1006); __asm__ volatile("" ::: "memory"); }
NOINLINE int run_jit(void) {
    /* sub $8,%rsp; movabs $jit_target,%rax; call *%rax; add $8,%rsp; ret */
    unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,
                            0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3};
    void (*target)(void) = jit_target;
    memcpy(code + 6, &target, 8);
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return -1;
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return -1;
    ((void (*)(void))page)();
    __asm__ volatile("" ::: "memory");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: u_places PLUGIN.so\n"); return 2; }
    nofp_a();
    if (call_plugin(argv[1], 1002) != 0 || call_plugin(argv[1], 1003) != 0) return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sig_outer();
    pthread_t t;
    if (pthread_create(&t, NULL, worker_start, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    if (run_jit() != 0) return 1;
    puts("ok");
    return 0;
}
