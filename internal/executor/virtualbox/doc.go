// Package virtualbox is the virtualbox executor (executor =
// "virtualbox", GitLab Runner's): each job runs over SSH in a VirtualBox
// VM cloned from a base VM, driven with VBoxManage as GitLab Runner's
// executors/virtualbox and helpers/virtualbox drive it.
//
// It is the VM core (package internal/executor/vm: one VM per
// concurrency slot, reverted to its "Started" snapshot before each job,
// or a fresh clone per job with disable_snapshots; allowed_images; boot
// timeout) on a Hypervisor of VBoxManage commands, and the instance
// executor's stages over SSH on top.
//
// # Configuration
//
// A GitLab Runner config.toml runs unchanged:
//
//	[[runners]]
//	  executor = "virtualbox"
//	  [runners.virtualbox]
//	    base_name = "debian-12"         # the VM clones are made of (required)
//	    base_snapshot = "ready"         # optional: the base's snapshot clones link to
//	    base_folder = "/srv/vbox"       # optional: where clones' files go
//	    disable_snapshots = false
//	    allowed_images = ["^debian-"]   # job image: names another base VM
//	    start_type = "headless"         # startvm --type: gui, headless, sdl, separate
//	    boot_timeout = "5m"             # drover's: start to SSH answer
//	  [runners.ssh]
//	    user = "gitlab"
//	    password = "secret"             # or identity_file
//	    port = "22"                     # the guest's SSH port
//
// # Commands
//
// A job's VM is named <base>-runner-<short token>-concurrent-<slot>, or
// with disable_snapshots <base>-runner-<short
// token>-project-<project>-concurrent-<slot>. Before each job:
//
//	VBoxManage --version
//	VBoxManage showvminfo <vm>                  # does it exist?
//	# it does (snapshots on):
//	VBoxManage snapshot <vm> restorecurrent
//	VBoxManage startvm <vm> --type headless
//	# it does not:
//	VBoxManage snapshot <base> list --machinereadable  # current snapshot
//	VBoxManage snapshot <base> take "Base State"       # when it has none
//	VBoxManage clonevm <base> --mode machine --name <vm> --register --snapshot <snap> --options link [--basefolder <dir>]
//	VBoxManage list vms -l                      # host ports in use
//	VBoxManage modifyvm <vm> --natpf1 guestssh,tcp,127.0.0.1,<port>,,<guest port>
//	VBoxManage startvm <vm> --type headless
//	VBoxManage snapshot <vm> take Started       # once SSH answers; not with disable_snapshots
//
// with showvminfo <vm> --machinereadable (VMState) read until the VM
// runs, and showvminfo <vm> (the guestssh rule's host port) for the SSH
// address. After the job: controlvm <vm> poweroff, and with
// disable_snapshots unregistervm <vm> --delete.
package virtualbox
