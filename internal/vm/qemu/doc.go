// Package qemu runs QEMU virtual machines for drover's VM executors and
// controls them through QMP, QEMU's JSON control socket: never by reading
// a console.
//
// # Processes
//
// A VM is a qemu-system-x86_64 process started with -daemonize in a
// session of its own, so it outlives the drover process that started it
// (a crashed or restarted manager finds it again). Everything about it
// lives in its directory:
//
//	qmp.sock     the QMP socket (Monitor)
//	qemu.pid     QEMU's pid (-pidfile)
//	console.log  the guest's serial console, appended across starts
//	qemu.log     QEMU's own messages while it starts
//	vm.json      the Machine and host SSH port of the current start
//
// Find reconnects from the directory: the pid file must name a live
// qemu-system-* process and the socket must answer. Start returns when
// QEMU's first process exits, which -daemonize makes the moment the VM is
// set up: sockets bound, a saved state loaded, or QEMU's error message.
// Process exits are waited for on a pidfd (QEMU is not drover's child).
//
// # Networking
//
// User networking (slirp) with one forward: 127.0.0.1:<host port> to the
// guest's SSH port. The guest sees 10.0.2.15/24, the host's loopback as
// 10.0.2.2 and DNS at 10.0.2.3.
//
// # Disks and snapshots
//
// A VM's disk is a virtio disk, normally a qcow2 overlay (a linked clone:
// Images.CreateOverlay) of a base image, qcow2 or raw. Monitor.SaveVM
// stores the running state (devices, memory, disk) as an internal
// snapshot of the qcow2 disk (every writable disk must be qcow2), and
// Monitor.LoadVM, or StartOptions.LoadVM at start, returns to it.
//
// Facts checked with QEMU 7.2:
//
//   - A saved state loads into a QEMU started with the same Machine
//     (memory, CPUs, machine type, devices): the -kernel/-initrd/-append
//     of a direct boot do not matter to it, the memory size does.
//   - The host port of the SSH forward may differ between the start that
//     saved a state and the one that loads it: slirp's forwarding rules
//     are not part of the saved state (TestLoadVMOtherHostPort). The
//     guest's own TCP connections of the saved moment are dead after a
//     load; new ones work at once.
//   - An internal snapshot is not read through a backing chain: a qcow2
//     overlay of a base does not have the base's snapshots. A VM that
//     starts from a base's saved state therefore runs on a full copy of
//     the base (Images.Copy; sparse, reflinked where the file system
//     can), not on an overlay.
package qemu
