/*
 * maps.c — the program's own mappings:
 *   mmap 1 MiB anonymous, write to it, mremap it to 2 MiB (MREMAP_MAYMOVE),
 *   check the data survived, munmap the 2 MiB;
 *   then mmap64 64 KiB anonymous and munmap it.
 *
 * Expected, from this program: mmap calls 1 (mean size 1048576), mmap64
 * calls 1 (mean size 65536), mremap calls 1 (mean size 2097152, the new
 * length), munmap calls 2 (mean size (2097152+65536)/2 = 1081344), none
 * failed; program mappings: 2 calls, 1048576+65536 = 1114112 bytes. No
 * malloc at all. Exit code 0; 1 if the data did not survive the move.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    size_t mib = 1 << 20;
    char *p = mmap(NULL, mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 3;
    memset(p, 0x11, mib);
    char *q = mremap(p, mib, 2 * mib, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) return 3;
    if (q[0] != 0x11 || q[mib - 1] != 0x11) return 1;
    if (munmap(q, 2 * mib) != 0) return 3;
    char *r = mmap64(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 3;
    r[0] = 1;
    if (munmap(r, 64 << 10) != 0) return 3;
    return 0;
}
