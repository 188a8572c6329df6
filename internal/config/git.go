package config

// GitOptions are the [[runners]] keys of get_sources, with GitLab Runner's
// default of the runner's executor for each key not set.
type GitOptions struct {
	// SafeDirectoryCheckout (safe_directory_checkout) adds the project
	// directory to git's global safe.directory before the checkout: by
	// default with the docker, kubernetes and VM executors, whose
	// checkouts outlive the user that made them.
	SafeDirectoryCheckout bool
	// CleanGitConfig (clean_git_config) removes the checkout's git
	// configuration and hooks before the fetch: by default with every
	// executor but shell.
	CleanGitConfig bool
	// CustomBuildDir ([runners.custom_build_dir] enabled) lets jobs
	// choose their project directory with GIT_CLONE_PATH: by default
	// with the docker and kubernetes executors.
	CustomBuildDir bool
}

// GitOptions returns the runner's get_sources options.
func (r *RunnerConfig) GitOptions() GitOptions {
	var o GitOptions
	switch r.Executor {
	case "docker", "docker+machine", "docker-autoscaler", "kubernetes":
		o.SafeDirectoryCheckout, o.CustomBuildDir = true, true
	case "parallels", "virtualbox", "qemu":
		o.SafeDirectoryCheckout = true
	}
	o.CleanGitConfig = r.Executor != "shell"
	if b, ok := r.Extra["safe_directory_checkout"].(bool); ok {
		o.SafeDirectoryCheckout = b
	}
	if b, ok := r.Extra["clean_git_config"].(bool); ok {
		o.CleanGitConfig = b
	}
	if b, ok := r.CustomBuildDir["enabled"].(bool); ok {
		o.CustomBuildDir = b
	}
	return o
}
