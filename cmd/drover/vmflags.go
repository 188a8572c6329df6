package main

import "slices"

// vmFlags are the register flags of the VM executors' tables.
func vmFlags() []dockerFlag {
	return slices.Concat(virtualboxFlags(), parallelsFlags())
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

// parallelsFlags are the --parallels-* flags of register, as
// gitlab-runner spells them, for [runners.parallels].
func parallelsFlags() []dockerFlag {
	return []dockerFlag{
		{"parallels-base-name", "base_name", "PARALLELS_BASE_NAME", kindString, "Parallels VM the jobs' VMs are made from (required with --executor parallels)"},
		{"parallels-template-name", "template_name", "PARALLELS_TEMPLATE_NAME", kindString, "template made of the base VM (default <base>-template)"},
		{"parallels-disable-snapshots", "disable_snapshots", "PARALLELS_DISABLE_SNAPSHOTS", kindBool, "a fresh VM per job, deleted after it"},
		{"parallels-time-server", "time_server", "PARALLELS_TIME_SERVER", kindString, "time server the guests' clocks are synced with (default time.apple.com)"},
		{"parallels-allowed-images", "allowed_images", "PARALLELS_ALLOWED_IMAGES", kindList, "regular expression of the base VMs a job's image: may name"},
	}
}
