package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/buildinfo"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "drover",
		Short: "drover runs CI jobs: a coordinator, a runner manager and the tools around them",
		Long: `drover runs CI jobs. It is compatible with GitLab Runner:

  drover coordinator   holds the job queue and speaks GitLab's runner API v4
  drover run           runner manager: takes jobs from a coordinator (drover's or GitLab) and runs them
  drover local         one-command demo: coordinator + manager in one process running examples/
  drover lint          checks a .gitlab-ci.yml and shows the pipeline it makes
  drover exec          runs this work tree's .gitlab-ci.yml here (embedded coordinator + manager)
  drover pipeline      runs and inspects pipelines on a drover coordinator
  drover register      adds a runner to config.toml (verifies a glrt- token)
  drover list          lists the runners of config.toml
  drover submit/jobs/logs/cancel/artifacts   use a drover coordinator's job API
  drover install/uninstall/start/stop/restart/status   run drover as a systemd service
  drover vm image build   builds a guest image for the qemu executor

config.toml is /etc/drover/config.toml for root, ~/.drover/config.toml for
other users, or what --config (or $CONFIG_FILE) names.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Before every command: flags from their environment variables,
		// then --debug.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return usageError(err)
			}
			return applyDebug(cmd)
		},
	}
	root.PersistentFlags().Bool("debug", false, "log at debug level, as --log-level debug (drover local: also --verbose)")
	root.AddCommand(
		newCoordinatorCmd(),
		newRouterCmd(),
		newRunCmd(),
		newRegisterCmd(),
		newVerifyCmd(),
		newUnregisterCmd(),
		newListCmd(),
		newSubmitCmd(),
		newJobsCmd(),
		newLogsCmd(),
		newCancelCmd(),
		newRetryCmd(),
		newArtifactsCmd(),
		newLocalCmd(),
		newLintCmd(),
		newExecCmd(),
		newPipelineCmd(),
		newHookCmd(),
		newProjectCmd(),
		newScheduleCmd(),
		newAutoscaleCmd(),
		newHelperCmd(),
		newHelperImageCmd(),
		newImageCmd(),
		newFleetingCmd(),
		newVMCmd(),
	)
	root.AddCommand(serviceCmds()...)
	root.AddCommand(
		&cobra.Command{
			Use:   "version",
			Short: "Print drover's version, commit, build date, Go version and platform",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				io.WriteString(cmd.OutOrStdout(), versionText())
			},
		},
	)
	usageErrors(root)
	return root
}

// usageErrors makes every usage mistake exit with code 2, as config errors
// do: bad flags and flag values, wrong numbers of arguments, unknown
// commands (the rest of cobra's errors come from commands themselves).
func usageErrors(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError(gitlabFlagError(cmd, err)) })
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageError(err)
				}
				return nil
			}
		} else if c.HasSubCommands() {
			if !c.Runnable() {
				// Without a Run cobra answers any arguments with its help
				// and success; with one, the check below runs first.
				c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			}
			// "drover nope": cobra's own check, as a usage error.
			c.Args = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usageError(fmt.Errorf("unknown command %q for %q; see %s --help", a[0], cmd.CommandPath(), cmd.CommandPath()))
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// applyDebug makes --debug (gitlab-runner's too) the --log-level of cmd,
// and turns on its --verbose, where it has them.
func applyDebug(cmd *cobra.Command) error {
	if debug, _ := cmd.Flags().GetBool("debug"); !debug {
		return nil
	}
	for name, value := range map[string]string{"log-level": "debug", "verbose": "true"} {
		if cmd.Flags().Lookup(name) != nil {
			if err := cmd.Flags().Set(name, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// verboseLogger is drover's own log for the commands that print jobs'
// output (exec, local): text, errors only unless --verbose, then at
// level (--log-level); a bad level is a usage error.
func verboseLogger(w io.Writer, verbose bool, level string) (*slog.Logger, error) {
	if !verbose {
		level = "error"
	}
	logger, err := newLogger(w, level, "text")
	if err != nil {
		return nil, usageError(err)
	}
	return logger, nil
}

// newLogger builds the process logger. format: runner|text|json.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "", "info":
		lv = slog.LevelInfo
	case "debug":
		lv = slog.LevelDebug
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error", "fatal", "panic":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "runner":
		// GitLab Runner's own format, for log pipelines that parse it.
		return slog.New(newRunnerHandler(w, lv)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want runner, text or json", format)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// versionText is what drover version prints, in the manner of
// gitlab-runner --version: the version, then the commit and build date
// (stamped by a release build, else Go's VCS stamp), the Go version and the
// platform.
func versionText() string {
	bi := buildinfo.Get()
	commit := bi.Commit
	if bi.Modified {
		commit += " (with uncommitted changes)"
	}
	return fmt.Sprintf("drover %s\n  commit:     %s\n  built:      %s\n  go:         %s\n  os/arch:    %s/%s\n",
		bi.Version, commit, bi.Built, bi.GoVersion, bi.OS, bi.Arch)
}
