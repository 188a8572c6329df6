package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/config"
)

// configPathFor is where config.toml lives by default, as GitLab Runner
// places its own: /etc/drover/config.toml for root, ~/.drover/config.toml
// for everyone else, ./config.toml when there is no home directory.
func configPathFor(euid int, home string, homeErr error) string {
	switch {
	case euid == 0:
		return "/etc/drover/config.toml"
	case homeErr != nil || home == "":
		return "config.toml"
	}
	return filepath.Join(home, ".drover", "config.toml")
}

func defaultConfigPath() string {
	home, err := os.UserHomeDir()
	return configPathFor(os.Geteuid(), home, err)
}

// configFlag adds --config/-c, the config file, to f: CONFIG_FILE (as
// with gitlab-runner) or the default place.
func configFlag(f *pflag.FlagSet, p *string, usage string) {
	f.StringVarP(p, "config", "c", defaultConfigPath(), usage)
	envFlag(f, "config", "CONFIG_FILE")
}

// envFlag makes the environment variable env the value of flag name when
// the command line does not give one (applyEnv does it), as gitlab-runner's
// flags have environment variables. The variable is named in --help but
// its value is not shown there: it may be a token.
func envFlag(f *pflag.FlagSet, name, env string) {
	fl := f.Lookup(name)
	fl.Usage += " [$" + env + "]"
	if err := f.SetAnnotation(name, "env", []string{env}); err != nil {
		panic(err) // only for a flag that does not exist
	}
}

// applyEnv sets the flags of cmd that the command line leaves unset from
// their environment variables. A list flag takes a comma-separated list.
func applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		env := fl.Annotations["env"]
		if fl.Changed || len(env) == 0 {
			return
		}
		v, ok := os.LookupEnv(env[0])
		if !ok || v == "" {
			return
		}
		var err error
		if sv, isSlice := fl.Value.(pflag.SliceValue); isSlice {
			err = sv.Replace(strings.Split(v, ","))
		} else {
			err = fl.Value.Set(v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("$%s (for --%s): %w", env[0], fl.Name, err))
			return
		}
		fl.Changed = true
	})
	return errors.Join(errs...)
}

// configError names the config file in err unless its message does.
func configError(path string, err error) error {
	if err == nil || strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("config %s: %w", path, err)
}

// checkDefaultConfig explains a missing config file when it is the default
// one and ./config.toml exists: until drover followed GitLab Runner's
// places that was the default.
func checkDefaultConfig(cmd *cobra.Command, path string) error {
	if cmd.Flags().Changed("config") {
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat("config.toml"); err != nil {
		return nil
	}
	return usageError(fmt.Errorf("config %s: no such file; ./config.toml exists: give --config config.toml to use it (the default is no longer ./config.toml)", path))
}

// loadConfigFile loads the config file of a command; its errors name the
// file.
func loadConfigFile(cmd *cobra.Command, path string) (*config.Config, error) {
	if err := checkDefaultConfig(cmd, path); err != nil {
		return nil, err
	}
	cfg, err := loadManagedConfig(cmd.ErrOrStderr(), path)
	return cfg, configError(path, err)
}

// loadManagedConfig reads config.toml for a command that manages its
// runners: a runner whose executor this build lacks is a warning, so that
// a GitLab Runner config.toml can still be listed and its runners removed.
func loadManagedConfig(stderr io.Writer, path string) (*config.Config, error) {
	cfg, warns, err := config.LoadWith(path, config.ParseOptions{KeepUnavailable: true})
	for _, w := range warns {
		fmt.Fprintln(stderr, "warning:", w.String())
	}
	if err != nil {
		return nil, usageError(err)
	}
	return cfg, nil
}

// systemIDFor returns the system id kept next to the config file.
func systemIDFor(path string) (string, error) {
	id, err := config.LoadOrCreateSystemID(path)
	if err == nil {
		return id, nil
	}
	if cause := errors.Unwrap(err); cause != nil {
		err = cause // without the "config: read system ID" of the package
	}
	return "", fmt.Errorf("config %s: system ID: %w", path, err)
}

// enterWorkingDirectory is run's --working-directory (gitlab-runner's
// too): it makes dir the working directory of the process, against which
// relative builds_dir and cache_dir (and their defaults, ./builds and
// ./cache) are resolved. A relative --config still names the file
// relative to where drover started. It also explains a missing default
// config file (checkDefaultConfig).
func enterWorkingDirectory(cmd *cobra.Command, dir string) error {
	if err := checkDefaultConfig(cmd, cmd.Flag("config").Value.String()); err != nil || dir == "" {
		return err
	}
	path, err := filepath.Abs(cmd.Flag("config").Value.String())
	if err != nil {
		return err
	}
	if err := cmd.Flags().Set("config", path); err != nil {
		return err
	}
	if err := os.Chdir(dir); err != nil {
		return usageError(fmt.Errorf("--working-directory: %w", err))
	}
	return nil
}
