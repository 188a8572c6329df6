// Package parallels is the parallels executor (executor = "parallels",
// GitLab Runner's): each job runs over SSH in a Parallels Desktop VM made
// from a template of a base VM, driven with prlctl as GitLab Runner's
// executors/parallels and helpers/parallels drive it.
//
// It is the VM core (package internal/executor/vm: one VM per
// concurrency slot, reverted to its "Started" snapshot before each job,
// or a fresh VM per job with disable_snapshots; allowed_images; boot
// timeout) on a Hypervisor of prlctl commands, and the instance
// executor's stages over SSH on top.
//
// # Configuration
//
// A GitLab Runner config.toml runs unchanged:
//
//	[[runners]]
//	  executor = "parallels"
//	  [runners.parallels]
//	    base_name = "macos-14"          # the VM templates are made of (required)
//	    template_name = "macos-14-tpl"  # default <base>-template
//	    disable_snapshots = false
//	    time_server = "time.apple.com"  # the guests' clocks are synced with it
//	    allowed_images = ["^macos-"]    # job image: names another base VM
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
//	prlctl --version
//	prlctl list <vm> --no-header --output status   # exists? running?
//	# it exists (snapshots on):
//	prlctl snapshot-list <vm>                      # the current snapshot (*)
//	prlctl snapshot-switch <vm> --id <id>
//	prlctl start <vm>
//	# it does not:
//	prlctl clone <base> --name <template> --template --linked   # once
//	prlctl create <vm> --ostemplate <template>
//	prlctl start <vm>
//	prlctl exec <vm> exit 0                        # until Parallels Tools answer
//	prlctl snapshot <vm> --name Started            # once SSH answers; not with disable_snapshots
//	# then, every job:
//	prlctl exec <vm> which ntpdate                 # sudo ntpdate -u <time_server>
//	prlctl exec <vm> which sntp                    # else sudo sntp -sS <time_server>
//
// SSH goes to the address Parallels' DHCP server leased to the VM's
// net0 MAC address (prlctl list -i <vm>; the leases are in
// /Library/Preferences/Parallels/parallels_dhcp_leases), at [runners.ssh]
// port. After the job: prlctl stop <vm> --kill, and with
// disable_snapshots prlctl delete <vm>.
//
// Apple Silicon: GitLab Runner reads the address from prlctl list --json
// and makes no snapshots there; drover does neither yet (the leases and
// snapshots are used on every host).
package parallels
