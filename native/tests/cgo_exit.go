// cgo_exit.go — a Go program with cgo: 1000 malloc/free pairs and one kept
// malloc(77) in C, "cgo\n" on stdout, os.Exit(5). Go ends through the
// exit_group system call, not the C library's exit. With the argument
// "cexit" it ends through the C library's exit(5) instead.
package main

/*
#include <stdlib.h>
static void work(int n) { for (int i = 0; i < n; i++) { void *p = malloc(100); free(p); } }
static void *keep(void) { return malloc(77); }
*/
import "C"

import (
	"fmt"
	"os"
)

func main() {
	C.work(1000)
	_ = C.keep()
	fmt.Println("cgo")
	if len(os.Args) > 1 && os.Args[1] == "cexit" {
		os.Stdout.Sync()
		C.exit(5)
	}
	os.Exit(5)
}
