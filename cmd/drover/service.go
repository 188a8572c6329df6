package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/service"
)

// systemdRunDir exists when systemd is the init system (sd_booted).
const systemdRunDir = "/run/systemd/system"

// serviceHost says what managing services needs and this machine lacks,
// as a usage error (exit code 2).
func serviceHost(needRoot bool) error {
	if err := service.CheckHost(systemdRunDir, os.Geteuid(), needRoot); err != nil {
		return usageError(err)
	}
	return nil
}

// serviceTarget checks a --service name and that this machine can manage
// services (needRoot: as root), and returns the name.
func serviceTarget(name string, needRoot bool) (string, error) {
	n, err := service.CheckName(name)
	if err != nil {
		return "", usageError(err)
	}
	return n, serviceHost(needRoot)
}

// serviceNameFlag adds --service/-n (gitlab-runner's) with default def.
func serviceNameFlag(f *pflag.FlagSet, p *string, def string) {
	f.StringVarP(p, "service", "n", def, "name of the systemd service (its unit is /etc/systemd/system/NAME.service)")
}

// installFlags are the flags both install commands share.
type installFlags struct {
	user, service string
	force, print  bool
	hardening     bool
	stopTimeout   time.Duration
}

func (o *installFlags) define(f *pflag.FlagSet, defService string, defStop time.Duration, stopWhat string) {
	f.StringVarP(&o.user, "user", "u", "", "user the service runs as (default root); it must exist")
	serviceNameFlag(f, &o.service, defService)
	f.BoolVar(&o.force, "force", false, "replace an existing unit file of that name")
	f.BoolVar(&o.print, "print", false, "print the unit file and change nothing (needs neither root nor systemd)")
	f.BoolVar(&o.hardening, "hardening", true, "sandbox the service (NoNewPrivileges, ProtectSystem, ProtectHome=read-only, PrivateTmp, ...); --hardening=false for jobs that need sudo or other setuid programs")
	f.DurationVar(&o.stopTimeout, "stop-timeout", defStop, "how long systemd waits for the service to stop ("+stopWhat+") before it kills it (TimeoutStopSec); 0: for ever")
}

// check checks --service, that this machine can install services (not
// needed for --print) and --user, and returns the service's name and the
// user's account.
func (o *installFlags) check() (string, account, error) {
	name, err := service.CheckName(o.service)
	if err != nil {
		return "", account{}, usageError(err)
	}
	if !o.print {
		if err := serviceHost(true); err != nil {
			return "", account{}, err
		}
	}
	a, err := lookupAccount(o.user)
	return name, a, err
}

// install prints u (--print), or makes what the service needs (prepare)
// and installs u.
func (o *installFlags) install(cmd *cobra.Command, u service.Unit, prepare func(out io.Writer) error) error {
	out := cmd.OutOrStdout()
	if o.print {
		_, err := io.WriteString(out, u.Render())
		return err
	}
	if err := prepare(out); err != nil {
		return err
	}
	return installUnit(cmd.Context(), out, u, o.force)
}

// account is the user a service runs as.
type account struct {
	name, group string
	uid, gid    int
	home        string
}

// lookupAccount finds name ("" is root) in the user database.
func lookupAccount(name string) (account, error) {
	if name == "" {
		name = "root"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, usageError(fmt.Errorf("--user %s: no such user (create it first, e.g. useradd --system --create-home %s)", name, name))
	}
	a := account{name: u.Username, home: u.HomeDir}
	a.uid, _ = strconv.Atoi(u.Uid)
	a.gid, _ = strconv.Atoi(u.Gid)
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		a.group = g.Name
	} else {
		a.group = u.Gid
	}
	return a, nil
}

// ensureDir makes dir (and its parents) if missing, owned by a with mode
// perm, and says so on w. An existing directory is left as it is.
func ensureDir(w io.Writer, dir string, a account, perm os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return usageError(fmt.Errorf("%s is not a directory", dir))
		}
		return nil
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	if err := os.Chown(dir, a.uid, a.gid); err != nil {
		return err
	}
	fmt.Fprintf(w, "created %s (owner %s)\n", dir, a.name)
	return nil
}

// executable is the absolute path of this drover, symlinks resolved, for
// ExecStart.
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

func newInstallCmd() *cobra.Command {
	var o installFlags
	var workDir, cfgPath string
	var keepJobs bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the runner manager (drover run) as a systemd service",
		Long: `Installs the runner manager as a systemd service, as gitlab-runner install
does: writes /etc/systemd/system/drover.service (--service names another),
running

  drover run --config CONFIG --working-directory DIR

as --user, reloads systemd and enables the service (it starts at boot).
drover start starts it now. Needs root and systemd.

Stopping the service drains it: systemd sends SIGQUIT, drover run stops
asking for jobs and waits for the running ones (up to --stop-timeout, then
systemd kills what is left); systemctl reload (SIGHUP) rereads config.toml.
It restarts when it exits. The unit is sandboxed (--hardening): /usr, /boot
and /etc are read-only but for the config directory, home directories are
read-only but for the working directory, /tmp is private, setuid programs
gain nothing.

The working directory (default: the user's home) and the config directory
are made, owned by the user, when missing, and an empty config.toml
(concurrent = 1, no runners) is written when there is none, so that the
service runs and picks up the runners drover register adds.

  sudo useradd --system --create-home --home-dir /var/lib/drover drover
  sudo drover install --user drover --working-directory /var/lib/drover --config /etc/drover/config.toml
  sudo drover register --config /etc/drover/config.toml --url URL --token glrt-...
  sudo drover start

drover install coordinator installs the coordinator the same way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, a, err := o.check()
			if err != nil {
				return err
			}
			if workDir == "" {
				workDir = a.home
			}
			if workDir, err = filepath.Abs(workDir); err != nil {
				return usageError(fmt.Errorf("--working-directory: %w", err))
			}
			if cfgPath, err = filepath.Abs(cfgPath); err != nil {
				return usageError(fmt.Errorf("--config: %w", err))
			}
			exe, err := executable()
			if err != nil {
				return fmt.Errorf("path of drover: %w", err)
			}
			u := service.RunnerUnit(service.RunnerOptions{
				Name: name, Executable: exe, User: userOrEmpty(a), Group: groupOrEmpty(a),
				WorkingDirectory: workDir, Config: cfgPath,
				StopTimeout: o.stopTimeout, Hardening: o.hardening, KeepJobs: keepJobs,
			})
			return o.install(cmd, u, func(out io.Writer) error {
				if err := ensureDir(out, workDir, a, 0o700); err != nil {
					return fmt.Errorf("--working-directory: %w", err)
				}
				if err := ensureDir(out, filepath.Dir(cfgPath), a, 0o700); err != nil {
					return fmt.Errorf("--config: %w", err)
				}
				if err := ensureConfig(out, cfgPath, a); err != nil {
					return fmt.Errorf("--config: %w", err)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	o.define(f, service.DefaultRunnerService, service.DefaultRunnerStopTimeout, "the drain: running jobs finish")
	f.StringVarP(&workDir, "working-directory", "d", "", "working directory of drover run (builds and cache are there unless config.toml says otherwise; default: the user's home)")
	configFlag(f, &cfgPath, "config file of the service (made absolute)")
	f.BoolVar(&keepJobs, "keep-jobs", false, "KillMode=process: the processes of jobs kept in a job store ([runners.store]) outlive a crash of drover run, which resumes them when systemd restarts it (default: what is left when drover run exits is killed)")
	cmd.AddCommand(newInstallCoordinatorCmd())
	return cmd
}

func userOrEmpty(a account) string {
	if a.uid == 0 {
		return ""
	}
	return a.name
}

func groupOrEmpty(a account) string {
	if a.uid == 0 {
		return ""
	}
	return a.group
}

// emptyConfig is the config.toml drover install writes when there is
// none: drover run runs with it, doing nothing until register adds a
// runner (it rereads the file when it changes).
const emptyConfig = "concurrent = 1\n"

// ensureConfig writes emptyConfig to path, owned by a, when path does not
// exist.
func ensureConfig(w io.Writer, path string, a account) error {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, emptyConfig); err != nil {
		f.Close()
		return err
	}
	if err := f.Chown(a.uid, a.gid); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s without runners (drover register adds them)\n", path)
	return nil
}

// installUnit installs u and tells what it did.
func installUnit(ctx context.Context, w io.Writer, u service.Unit, force bool) error {
	m := &service.Manager{}
	path, err := m.Install(ctx, u, force)
	if errors.Is(err, service.ErrExists) {
		return usageError(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "installed %s and enabled %s; start it with: drover start --service %s\n", path, u.FileName(), u.Name)
	return nil
}

func newInstallCoordinatorCmd() *cobra.Command {
	var o installFlags
	var data, listen string
	cmd := &cobra.Command{
		Use:   "coordinator [flags] [-- more drover coordinator flags]",
		Short: "Install the coordinator (drover coordinator) as a systemd service",
		Long: `Installs the coordinator as a systemd service: writes
/etc/systemd/system/drover-coordinator.service (--service names another),
running

  drover coordinator --data DATA --listen ADDR [flags after --]

as --user in DATA (made, owned by the user, when missing), reloads systemd
and enables it. drover start --service drover-coordinator starts it. Needs
root and systemd.

Stopping it sends SIGTERM: it stops listening and finishes the requests in
flight. Environment variables (DROVER_ADMIN_TOKEN, DROVER_DATABASE_URL,
DROVER_SECRET_KEY) are read from /etc/default/SERVICE when it exists. The
unit is sandboxed (--hardening): the file system is read-only but DATA, no
devices, no capabilities (but binding a port under 1024).

  sudo useradd --system --no-create-home drover
  sudo drover install coordinator --user drover --data /var/lib/drover-coordinator --listen 0.0.0.0:8080 -- --public-url http://ci.example.com:8080
  sudo drover start --service drover-coordinator`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, extra []string) error {
			if n := cmd.ArgsLenAtDash(); n != 0 && len(extra) > 0 {
				return usageError(fmt.Errorf("unexpected argument %q: drover coordinator's own flags go after --", extra[0]))
			}
			name, a, err := o.check()
			if err != nil {
				return err
			}
			if data, err = filepath.Abs(data); err != nil {
				return usageError(fmt.Errorf("--data: %w", err))
			}
			exe, err := executable()
			if err != nil {
				return fmt.Errorf("path of drover: %w", err)
			}
			u := service.CoordinatorUnit(service.CoordinatorOptions{
				Name: name, Executable: exe, User: userOrEmpty(a), Group: groupOrEmpty(a),
				Data: data, Listen: listen, Extra: extra,
				StopTimeout: o.stopTimeout, Hardening: o.hardening,
			})
			return o.install(cmd, u, func(out io.Writer) error {
				if err := ensureDir(out, data, a, 0o700); err != nil {
					return fmt.Errorf("--data: %w", err)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	o.define(f, service.DefaultCoordinatorService, service.DefaultCoordinatorStopTimeout, "requests in flight finish")
	f.StringVar(&data, "data", "/var/lib/drover-coordinator", "data directory of the coordinator (SQLite database, job logs, admin token), its working directory")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address the coordinator listens on (host:port)")
	return cmd
}

func newUninstallCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Stop, disable and remove a service drover install wrote",
		Long: `Stops the service (a runner manager drains first: running jobs finish),
disables it, removes its unit file and reloads systemd, as gitlab-runner
uninstall does. config.toml, the working directory and the coordinator's
data stay. Needs root and systemd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := serviceTarget(name, true)
			if err != nil {
				return err
			}
			path, err := (&service.Manager{}).Uninstall(cmd.Context(), n)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stopped and disabled %s.service, removed %s\n", n, path)
			return nil
		},
	}
	serviceNameFlag(cmd.Flags(), &name, service.DefaultRunnerService)
	return cmd
}

// newServiceVerbCmd is drover start|stop|restart.
func newServiceVerbCmd(verb, short, long string, do func(*service.Manager, context.Context, string) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   verb,
		Short: short,
		Long:  long + "\n\nNeeds root and systemd; --service names the service (default drover).",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := serviceTarget(name, true)
			if err != nil {
				return err
			}
			return do(&service.Manager{}, cmd.Context(), n)
		},
	}
	serviceNameFlag(cmd.Flags(), &name, service.DefaultRunnerService)
	return cmd
}

func newStatusCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether a service drover install wrote is running",
		Long: `Prints one line about the service, such as

  drover.service: active (running) since Sat 2026-11-28 12:00:00 UTC, pid 812, enabled

and exits as systemctl status does: 0 when it runs, 3 when it does not
(stopped, failed, starting or stopping), 4 when it is not installed. Needs
systemd, not root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := serviceTarget(name, false)
			if err != nil {
				return err
			}
			st, err := (&service.Manager{}).Status(cmd.Context(), n)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), st.String())
			if code := st.ExitCode(); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	serviceNameFlag(cmd.Flags(), &name, service.DefaultRunnerService)
	return cmd
}

// serviceCmds are install, uninstall, start, stop, restart and status.
func serviceCmds() []*cobra.Command {
	return []*cobra.Command{
		newInstallCmd(),
		newUninstallCmd(),
		newServiceVerbCmd("start", "Start a service drover install wrote",
			"Starts the service now (systemctl start).", (*service.Manager).Start),
		newServiceVerbCmd("stop", "Stop a service drover install wrote (a runner drains first)",
			"Stops the service (systemctl stop). A runner manager drains: it stops asking for\njobs and returns when the running ones have finished (or --stop-timeout of\ndrover install has passed).", (*service.Manager).Stop),
		newServiceVerbCmd("restart", "Restart a service drover install wrote (a runner drains first)",
			"Restarts the service (systemctl restart): a runner manager drains first, as\nwith drover stop.", (*service.Manager).Restart),
		newStatusCmd(),
	}
}
