/*
 * exit_code.c — stdio pass-through and exit code.
 *
 * Writes "to stdout: hello\n" on stdout and "to stderr: hello\n" on stderr,
 * then copies stdin to stdout prefixed by "echo: " (once, before the copied
 * bytes), and exits with code 7.
 * So with stdin "abc\ndef\n": stdout is "to stdout: hello\necho: abc\ndef\n",
 * stderr is "to stderr: hello\n", exit code 7.
 */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    fputs("to stdout: hello\n", stdout);
    fflush(stdout);
    fputs("to stderr: hello\n", stderr);
    fputs("echo: ", stdout);
    int c;
    while ((c = getchar()) != EOF) putchar(c);
    fflush(stdout);
    exit(7);
}
