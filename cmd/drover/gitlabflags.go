package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// gitlabFlag is a flag of a gitlab-runner command that drover's command of
// the same name lacks. A name ending in "-" stands for every flag it
// begins.
type gitlabFlag struct {
	name, short string
	why         string
}

// gitlabOnlyFlags returns the gitlab-runner flags of command (register,
// run, ...) that drover does not support, so that a command line written
// for gitlab-runner fails naming the flag and why, not with cobra's
// "unknown flag".
func gitlabOnlyFlags(command string) []gitlabFlag {
	switch command {
	case "register":
		return registerOnlyFlags()
	case "run":
		return []gitlabFlag{
			{name: "service", short: "n", why: "drover does not install itself as a service; run it under systemd or another supervisor"},
			{name: "user", short: "u", why: "set user in config.toml"},
			{name: "syslog", why: "drover logs to stderr"},
			{name: "listen-address", why: "set listen_address in config.toml"},
		}
	}
	return nil
}

func registerOnlyFlags() []gitlabFlag {
	noScripts := "drover does not run the runner's own scripts (pre_build_script and the like) yet"
	inFile := "write it in [runners.docker] of config.toml after registering"
	fs := []gitlabFlag{
		{name: "ssh-", why: "not a flag of drover register: write it in [runners.ssh] of config.toml after registering"},
		{name: "virtualbox-", why: "not a flag of drover register: write it in [runners.virtualbox] of config.toml after registering"},
		{name: "parallels-", why: "not a flag of drover register: write it in [runners.parallels] of config.toml after registering"},
		{name: "machine-", why: "write [runners.machine] in config.toml after registering"},
		{name: "cache-gcs-", why: "drover does not act on this [runners.cache.gcs] key yet"},
		{name: "cache-azure-", why: "drover does not act on this [runners.cache.azure] key yet"},
		{name: "cache-s3-", why: "drover does not act on this [runners.cache.s3] key yet"},
		{name: "custom_build_dir-", why: "not a flag of drover register: write [runners.custom_build_dir] in config.toml after registering"},
		{name: "referees-", why: "drover has no referees"},
		{name: "template-config", why: "drover has no configuration templates; edit config.toml after registering"},
		{name: "feature-flags", why: "drover implements no GitLab Runner feature flags yet"},
		{name: "clone-url", why: "not a flag of drover register: write clone_url in [[runners]] of config.toml after registering"},
	}
	for _, n := range []string{"pre-clone-script", "post-clone-script", "pre-get-sources-script", "post-get-sources-script", "pre-build-script", "post-build-script"} {
		fs = append(fs, gitlabFlag{name: n, why: noScripts})
	}
	fs = append(fs,
		gitlabFlag{name: "docker-isolation", why: "drover reads this [runners.docker] key from config.toml and does not apply it: Windows containers only"},
		gitlabFlag{name: "docker-helper-image-flavor", why: "drover reads this [runners.docker] key from config.toml and does not apply it: drover builds its own helper image"})
	for _, n := range []string{"tmpfs", "services-tmpfs", "sysctls", "container-labels", "ulimit", "log-options", "volume-driver-ops", "services_devices"} {
		fs = append(fs, gitlabFlag{name: "docker-" + n, why: "a table: " + inFile})
	}
	for _, n := range kubernetesNotApplied() {
		fs = append(fs, gitlabFlag{name: "kubernetes-" + n, why: "drover reads this [runners.kubernetes] key from config.toml but does not apply it yet"})
	}
	// The rest of gitlab-runner's --kubernetes-* flags, and any it adds.
	fs = append(fs, gitlabFlag{name: "kubernetes-", why: "not a flag of drover register: write it in [runners.kubernetes] of config.toml after registering"})
	// The rest of gitlab-runner's --docker-* flags, and any it adds.
	return append(fs, gitlabFlag{name: "docker-", why: "not a flag of drover register: " + inFile})
}

// gitlabFlagError turns cobra's "unknown flag" error for a gitlab-runner
// flag that cmd lacks into one that names the flag and says why.
func gitlabFlagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return err
	}
	name, short := ne.GetSpecifiedName(), ne.GetSpecifiedShortnames() != ""
	for _, f := range gitlabOnlyFlags(cmd.Name()) {
		var match bool
		switch {
		case short:
			match = f.short == name
		case strings.HasSuffix(f.name, "-"):
			match = strings.HasPrefix(name, f.name)
		default:
			match = f.name == name
		}
		if !match {
			continue
		}
		shown := "--" + name
		if short {
			shown = "-" + name + " (--" + f.name + ")"
		}
		return fmt.Errorf("flag %s is a gitlab-runner flag drover does not support (yet): %s", shown, f.why)
	}
	return err
}

// kubernetesNotApplied are gitlab-runner's --kubernetes-* flags (without
// the prefix, spelled as gitlab-runner does) of the [runners.kubernetes]
// keys drover reads but does not apply yet.
func kubernetesNotApplied() []string {
	fs := []string{
		"bearer_token_overwrite_allowed", "namespace_per_job", "privileged", "runtime-class-name",
		"allow-privilege-escalation", "ephemeral-storage-limit", "ephemeral-storage-request",
		"service-ephemeral_storage-limit", "service-ephemeral_storage-request",
		"helper-ephemeral_storage-limit", "helper-ephemeral_storage-request",
		"pod-cpu-limit", "pod-cpu-request", "pod-memory-limit", "pod-memory-request",
		"allowed-pull-policies", "allowed-users", "allowed-groups",
		"node_selector_overwrite_allowed", "node_tolerations_overwrite_allowed", "pod_labels_overwrite_allowed",
		"pod_annotations_overwrite_allowed", "service_account_overwrite_allowed", "affinity",
		"helper-image-flavor",
		"helper-image-autoset-arch-and-os", "pod_termination_grace_period_seconds", "cleanup_resources_timeout",
		"resource-availability-check-max-attempts", "retry-limit", "retry-backoff-max", "retry-limits",
		"scheduler-name", "host_aliases", "cap-add", "cap-drop", "suspend-pvc-size", "suspend-pvc-storage-class",
		"dns-policy", "priority_class_name", "logs-base-dir", "scripts-base-dir", "print-pod-warning-events",
		"pod-disruption-budget",
	}
	for _, p := range []string{"", "service-", "helper-", "pod-"} {
		for _, r := range []string{"cpu-limit", "cpu-request", "memory-limit", "memory-request"} {
			fs = append(fs, p+r+"-overwrite-max-allowed")
		}
	}
	for _, p := range []string{"ephemeral-storage-", "service-ephemeral_storage-", "helper-ephemeral_storage-"} {
		fs = append(fs, p+"limit-overwrite-max-allowed", p+"request-overwrite-max-allowed")
	}
	return fs
}
