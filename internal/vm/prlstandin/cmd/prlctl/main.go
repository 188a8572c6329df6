// Command prlctl is a stand-in for prlctl that cannot run here
// (Parallels Desktop runs on macOS only): it answers the commands
// drover's parallels executor runs, on QEMU guests (see package
// prlstandin). Only tests use it.
package main

import (
	"os"

	"github.com/drover-ci/drover/internal/vm/prlstandin"
)

func main() {
	os.Exit(prlstandin.Main(os.Args[1:], os.Stdout, os.Stderr))
}
