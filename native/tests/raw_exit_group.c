/*
 * raw_exit_group.c — ends through the exit_group system call, as Go programs
 * do, bypassing exit() and with it mtlab's exit flush.
 *
 * 10 mallocs of 100 bytes (kept), "bye\n" on stdout, then
 * syscall(SYS_exit_group, 5): exit code 5. The mallocs are still in the
 * thread's buffer (far below 64 KiB of events), so the trace holds none of
 * them and has no END record.
 */
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    for (int i = 0; i < 10; i++)
        if (!malloc(100)) return 3;
    if (write(1, "bye\n", 4) != 4) return 4;
    syscall(SYS_exit_group, 5);
    return 6;
}
