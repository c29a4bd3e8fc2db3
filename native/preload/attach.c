/*
 * attach.c — the two entry points `mtlab record --pid` calls in a running
 * process (attach build only: libmtlab_attach.so, dlopen'ed by an injected
 * call; see crates/mtlab/src/attach/).
 *
 *   mtlab_attach_begin(text)  settings as "KEY=VALUE\n" lines (the MTLAB_*
 *                             names of init.c); starts tracing and routes
 *                             the GOT slots of every loaded module to the
 *                             shims. 0, or -1: tracing did not start.
 *   mtlab_attach_end()        slots back to what they held, the trace
 *                             finished (STATS, END), the control thread
 *                             ended, the signal disposition and descriptors
 *                             put back: the process runs on as before and
 *                             the library can be unloaded.
 *
 * Both run on a thread the injector stopped and resumed at this call, with
 * the other threads running.
 */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "internal.h"

#ifdef MTLAB_ATTACH

#define EXPORT __attribute__((visibility("default")))

/* The steps' times (MTLAB_ATTACH_MARK): read by mtlab through /proc/PID/mem
 * after each call, to say where the stop at attach and detach went. */
EXPORT uint64_t mtlab_attach_marks[32];

/* `record --pid --live`: the descriptor of the watermark page this process
 * made (-1: none), read by mtlab after mtlab_attach_begin to open the page
 * through /proc/PID/fd. */
EXPORT int mtlab_attach_watermark_fd = -1;

void mtlab_attach_mark(int step) {
    struct timespec ts;
    if (step < 0 || step >= 32 || clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return;
    mtlab_attach_marks[step] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The settings, copied (the injector's text lies below the stopped thread's
 * stack pointer only for the duration of the call) as NUL-terminated
 * "KEY=VALUE" entries, an empty one last. */
static char settings[8192];

const char *mtlab_attach_conf(const char *name) {
    size_t n = strlen(name);
    for (const char *p = settings; *p; p += strlen(p) + 1)
        if (strncmp(p, name, n) == 0 && p[n] == '=') return p + n + 1;
    return NULL;
}

EXPORT int mtlab_attach_begin(const char *text) {
    memset(mtlab_attach_marks, 0, sizeof mtlab_attach_marks);
    MTLAB_ATTACH_MARK(0);
    size_t n = strlen(text);
    if (n + 2 > sizeof settings) return -1;
    memcpy(settings, text, n);
    settings[n] = settings[n + 1] = 0;
    for (size_t i = 0; i < n; i++)
        if (settings[i] == '\n') settings[i] = 0;
    return mtlab_attach_start();
}

/* Routed to from every dlopen slot while attached: the library's calls
 * would bind to the real functions (ours is not in the global scope), so
 * its slots are routed before the caller gets the handle. glibc's dlopen
 * takes the search path ($ORIGIN, RPATH, RUNPATH) and the namespace from
 * its caller: a name without a '/', or with a '$', is handed on as a tail
 * call (the caller stays the caller), and what it loaded is routed at the
 * next dlopen. A path is opened from here, where the caller does not
 * matter. */
void *mtlab_attach_dlopen(const char *file, int mode) {
    mtlab_got_add_loaded();
    if (!file || !strchr(file, '/') || strchr(file, '$')) return mtlab_real.dlopen(file, mode);
    void *h = mtlab_real.dlopen(file, mode);
    if (h) mtlab_got_add_loaded();
    return h;
}

EXPORT void mtlab_attach_end(void) {
    MTLAB_ATTACH_MARK(16);
    mtlab_got_restore();
    MTLAB_ATTACH_MARK(17);
    mtlab_attach_stop();
    MTLAB_ATTACH_MARK(18);
    mtlab_sampler_release();
    MTLAB_ATTACH_MARK(19);
    mtlab_writer_release();
    MTLAB_ATTACH_MARK(20);
    mtlab_thread_release();
    MTLAB_ATTACH_MARK(21);
}

#endif
