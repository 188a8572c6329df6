// Command VBoxManage is a stand-in for VBoxManage that cannot run here
// (no VirtualBox on this machine): it answers the commands drover's
// virtualbox executor runs, on QEMU guests (see package vboxstandin).
// Only tests use it.
package main

import (
	"os"

	"github.com/drover-ci/drover/internal/vm/vboxstandin"
)

func main() {
	os.Exit(vboxstandin.Main(os.Args[1:], os.Stdout, os.Stderr))
}
