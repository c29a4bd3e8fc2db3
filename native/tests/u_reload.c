/*
 * u_reload.c PLUGIN N — loads PLUGIN (u_plugin.c) with dlopen, makes 100
 * 64-byte allocations through plugin_outer and frees them, and unloads it;
 * N times. The plugin's range is often given to other memory between two
 * loads, so later maps snapshots show it anonymous. Exit code 0.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int n = argc > 2 ? atoi(argv[2]) : 200;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        void (*outer)(size_t) = (void (*)(size_t))dlsym(h, "plugin_outer");
        void *volatile *keep = (void *volatile *)dlsym(h, "plugin_keep");
        for (int k = 0; k < 100; k++) {
            outer(64);
            free(*keep);
        }
        dlclose(h);
    }
    return 0;
}
