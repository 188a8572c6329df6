package main

import "slices"

// vmFlags are the register flags of the VM executors' tables.
func vmFlags() []dockerFlag {
	return slices.Concat(virtualboxFlags())
}

// virtualboxFlags are the --virtualbox-* flags of register, as
// gitlab-runner spells them, for [runners.virtualbox].
func virtualboxFlags() []dockerFlag {
	return []dockerFlag{
		{"virtualbox-base-name", "base_name", "VIRTUALBOX_BASE_NAME", kindString, "VirtualBox VM the jobs' VMs are cloned from (required with --executor virtualbox)"},
		{"virtualbox-base-snapshot", "base_snapshot", "VIRTUALBOX_BASE_SNAPSHOT", kindString, "name or UUID of the base VM's snapshot the clones link to (default: its current one)"},
		{"virtualbox-base-folder", "base_folder", "VIRTUALBOX_BASE_FOLDER", kindString, "folder of the clones' files (default: VirtualBox's machine folder)"},
		{"virtualbox-disable-snapshots", "disable_snapshots", "VIRTUALBOX_DISABLE_SNAPSHOTS", kindBool, "a fresh clone per job, deleted after it"},
		{"virtualbox-allowed-images", "allowed_images", "VIRTUALBOX_ALLOWED_IMAGES", kindList, "regular expression of the base VMs a job's image: may name"},
		{"virtualbox-start-type", "start_type", "VIRTUALBOX_START_TYPE", kindString, "startvm --type: headless (default), gui, sdl or separate"},
	}
}
