package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/autoscale/runnerpool"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/fleet/fleetingdir"
)

func newFleetingCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "fleeting",
		Short: "Install and list the fleeting plugins config.toml names, and log in to their registries",
		Long: `Manages the fleeting plugins of the [runners.autoscaler] sections of
config.toml, as gitlab-runner fleeting does and in the same place, so that
plugins either of them installed serve both:

  drover fleeting install   installs the plugin of every [runners.autoscaler]
  drover fleeting list      shows which installed program each runner uses
  drover fleeting login     stores credentials for a plugin registry

A plugin value is an OCI reference whose tag is a version constraint:
"aws" or "aws:latest" is registry.gitlab.com/gitlab-org/fleeting/plugins/aws
at its newest version, "aws:1" the newest 1.x.y, "aws:1.2" the newest 1.2.y,
"aws:1.2.3" that version; "group/name:1" is on registry.gitlab.com,
"registry.example.com/ns/name:1" on registry.example.com. Plugins are
installed in $FLEETING_PLUGIN_PATH, else ~/.config/fleeting/plugins, as
<root>/<registry>/<repository>/<version>/plugin. The built-in providers
(docker, static, sim, qemu) and values that name a program on disk (/path,
./path, dir/file that exists, fleeting-plugin-* in PATH) need no install.`,
	}
	configFlag(cmd.PersistentFlags(), &cfgPath, "config file")
	cmd.AddCommand(newFleetingInstallCmd(&cfgPath), newFleetingListCmd(&cfgPath), newFleetingLoginCmd())
	return cmd
}

func newFleetingInstallCmd(cfgPath *string) *cobra.Command {
	var upgrade bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the fleeting plugin of every [runners.autoscaler] of config.toml",
		Long: `Installs the plugin of each [runners.autoscaler] of config.toml from its OCI
registry, and prints for each runner what it did: installed (repository,
version, path), already installed, or skipped (a built-in provider, or a
program on disk).

A plugin with an installed version matching its constraint is left as it
is; with --upgrade the registry is asked for the newest matching version,
which is installed next to the others. Versions are never removed.

Credentials for private registries come from Docker's config.json
($DOCKER_CONFIG, else ~/.docker), where drover fleeting login (or docker
login) stores them. A runner whose plugin fails does not stop the others;
the command then fails, naming each.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFile(cmd, *cfgPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			root := fleetingdir.Root()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Installing the fleeting plugins of %s into %s\n", *cfgPath, root)

			// One install per plugin value however many runners share it.
			done := map[string]string{}
			var configErrs, installErrs []error
			n := 0
			for i, r := range cfg.Runners {
				plugin, ok, err := autoscalerPlugin(r)
				if err != nil {
					configErrs = append(configErrs, fleetingError(*cfgPath, i, r, err))
					continue
				}
				if !ok {
					continue
				}
				n++
				prefix := fmt.Sprintf("runner %s: %s: ", runnerLabel(i, r), plugin)
				if msg, ok := done[plugin]; ok {
					fmt.Fprintln(out, prefix+msg)
					continue
				}
				msg, err := installPlugin(ctx, root, plugin, upgrade)
				if err != nil {
					fmt.Fprintln(out, prefix+"failed")
					err = fleetingError(*cfgPath, i, r, err)
					if errors.Is(err, errPluginValue) {
						configErrs = append(configErrs, err)
					} else {
						installErrs = append(installErrs, err)
					}
					continue
				}
				done[plugin] = msg
				fmt.Fprintln(out, prefix+msg)
			}
			if n == 0 && len(configErrs) == 0 {
				fmt.Fprintf(out, "No runner of %s has a [runners.autoscaler] plugin: nothing to install\n", *cfgPath)
			}
			if len(installErrs) > 0 {
				return errors.Join(append(installErrs, configErrs...)...)
			}
			if len(configErrs) > 0 {
				return usageError(errors.Join(configErrs...))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&upgrade, "upgrade", false, "ask the registry for the newest version matching each constraint even when one is installed")
	return cmd
}

// errPluginValue marks a plugin value that is no reference: a config
// error (exit code 2), not a failed install.
var errPluginValue = errors.New("invalid plugin value")

// installPlugin installs one plugin value and says what it did.
func installPlugin(ctx context.Context, root, plugin string, upgrade bool) (string, error) {
	if isBuiltinProvider(plugin) {
		return "skipped: built-in provider", nil
	}
	if p, ok := fleetingdir.LocalPath(plugin); ok {
		return "skipped: a program on disk (" + p + ")", nil
	}
	ref, err := fleetingdir.ParseRef(plugin)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errPluginValue, err)
	}
	if !upgrade {
		if path, ver, err := fleetingdir.Find(root, ref); err == nil {
			return fmt.Sprintf("already installed: %s version %s at %s", ref.Repository, ver, path), nil
		} else if !errors.Is(err, fleetingdir.ErrNotInstalled) {
			return "", err
		}
	}
	before, err := installedVersions(root, ref.Repository)
	if err != nil {
		return "", err
	}
	path, ver, err := fleetingdir.Install(ctx, root, ref)
	if errors.Is(err, fleetingdir.ErrUnauthorized) {
		host, _, _ := strings.Cut(ref.Repository, "/")
		return "", fmt.Errorf("%w; store credentials with drover fleeting login %s", err, host)
	}
	if err != nil {
		return "", err
	}
	if before[ver] {
		return fmt.Sprintf("already installed: %s version %s at %s (the newest matching %q)", ref.Repository, ver, path, ref.Constraint), nil
	}
	return fmt.Sprintf("installed %s version %s at %s", ref.Repository, ver, path), nil
}

// installedVersions is the set of versions of repository under root.
func installedVersions(root, repository string) (map[string]bool, error) {
	all, err := fleetingdir.List(root)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, in := range all {
		if in.Repository == repository {
			have[in.Version] = true
		}
	}
	return have, nil
}

// isBuiltinProvider reports whether plugin names a provider drover has
// built in rather than a fleeting plugin.
func isBuiltinProvider(plugin string) bool {
	switch plugin {
	case runnerpool.PluginDocker, runnerpool.PluginStatic, runnerpool.PluginSim, runnerpool.PluginQemu:
		return true
	}
	return false
}

// autoscalerPlugin is the plugin of r's [runners.autoscaler]; ok is
// false when it has none.
func autoscalerPlugin(r config.RunnerConfig) (plugin string, ok bool, err error) {
	v, ok := r.Autoscaler["plugin"]
	if !ok {
		return "", false, nil
	}
	plugin, isString := v.(string)
	if !isString || plugin == "" {
		return "", false, fmt.Errorf("[runners.autoscaler] plugin = %v: want the name of a plugin", v)
	}
	return plugin, true, nil
}

// runnerLabel names a runner in messages: its name, else its place.
func runnerLabel(i int, r config.RunnerConfig) string {
	if r.Name != "" {
		return fmt.Sprintf("%q", r.Name)
	}
	return fmt.Sprintf("#%d", i+1)
}

// fleetingError names the config file and the runner in err.
func fleetingError(path string, i int, r config.RunnerConfig, err error) error {
	return fmt.Errorf("config %s: runner %s: %w", path, runnerLabel(i, r), err)
}

func newFleetingListCmd(cfgPath *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Show the installed fleeting plugin each runner of config.toml uses, and all installed plugins",
		Long: `Prints, for each [runners.autoscaler] of config.toml, the program its plugin
resolves to: the newest installed version matching its constraint, or why
there is none (the directory looked in and the versions found there).
Then every plugin version installed in $FLEETING_PLUGIN_PATH (else
~/.config/fleeting/plugins), config.toml naming it or not. A config file
that does not exist yet lists no runners.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDefaultConfig(cmd, *cfgPath); err != nil {
				return err
			}
			root := fleetingdir.Root()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Fleeting plugins of %s\n", *cfgPath)
			if _, err := os.Stat(*cfgPath); errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(out, "  (%s does not exist yet)\n", *cfgPath)
			} else {
				cfg, err := loadConfigFile(cmd, *cfgPath)
				if err != nil {
					return err
				}
				listRunnerPlugins(out, *cfgPath, root, cfg)
			}
			installed, err := fleetingdir.List(root)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "Installed in %s\n", root)
			if len(installed) == 0 {
				fmt.Fprintln(out, "  (none)")
			}
			for _, in := range installed {
				fmt.Fprintf(out, "  %s version %s at %s\n", in.Repository, in.Version, in.Path)
			}
			return nil
		},
	}
}

// listRunnerPlugins prints what each runner's plugin resolves to.
func listRunnerPlugins(out io.Writer, path, root string, cfg *config.Config) {
	n := 0
	for i, r := range cfg.Runners {
		plugin, ok, err := autoscalerPlugin(r)
		if err != nil {
			fmt.Fprintf(out, "  runner %s: %v\n", runnerLabel(i, r), err)
			continue
		}
		if !ok {
			continue
		}
		n++
		prefix := fmt.Sprintf("  runner %s: %s: ", runnerLabel(i, r), plugin)
		switch p, local := fleetingdir.LocalPath(plugin); {
		case isBuiltinProvider(plugin):
			fmt.Fprintln(out, prefix+"built-in provider")
			continue
		case local:
			fmt.Fprintln(out, prefix+"program on disk at "+p)
			continue
		}
		ref, err := fleetingdir.ParseRef(plugin)
		if err != nil {
			fmt.Fprintln(out, prefix+err.Error())
			continue
		}
		p, ver, err := fleetingdir.Find(root, ref)
		if err != nil {
			fmt.Fprintln(out, prefix+err.Error()+"; drover fleeting install installs it")
			continue
		}
		fmt.Fprintf(out, "%s%s version %s at %s\n", prefix, ref.Repository, ver, p)
	}
	if n == 0 {
		fmt.Fprintf(out, "  (no runner of %s has a [runners.autoscaler] plugin)\n", path)
	}
}

func newFleetingLoginCmd() *cobra.Command {
	var username, password string
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "login [REGISTRY]",
		Short: "Store credentials for a fleeting plugin registry (registry.gitlab.com by default)",
		Long: `Stores a user name and password (or token) for REGISTRY, registry.gitlab.com
when none is given, where drover fleeting install and gitlab-runner
fleeting install look for them: Docker's config.json ($DOCKER_CONFIG, else
~/.docker), in the credential helper it names (credHelpers, credsStore),
else base64 in its "auths". The registry is not asked whether they are
right; the next install tells.

  drover fleeting login --username deploy --password-stdin registry.example.com < token`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			registry := fleetingdir.DefaultRegistry
			if len(args) == 1 {
				registry = args[0]
			}
			if username == "" {
				return usageError(errors.New("fleeting login: give --username"))
			}
			switch {
			case passwordStdin && cmd.Flags().Changed("password"):
				return usageError(errors.New("fleeting login: give --password or --password-stdin, not both"))
			case passwordStdin:
				data, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("fleeting login: read the password from stdin: %w", err)
				}
				password = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
			case !cmd.Flags().Changed("password"):
				return usageError(errors.New("fleeting login: give --password or --password-stdin"))
			}
			file, err := fleetingdir.Login(registry, username, password)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stored the credentials of %s for %s in %s\n", username, registry, file)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&username, "username", "u", "", "user name (for a GitLab deploy token, its user name)")
	f.StringVarP(&password, "password", "p", "", "password or token (visible in the process list: prefer --password-stdin)")
	f.BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin (one line)")
	return cmd
}
