// Package service installs drover's daemons as systemd services and drives
// them with systemctl, as gitlab-runner install|start|stop|status do: the
// runner manager (drover run), which drains on SIGQUIT, and the
// coordinator, which stops gracefully on SIGTERM.
//
// A Unit is rendered to the text of a .service file; a Manager writes it
// under /etc/systemd/system, reloads systemd and enables it, and starts,
// stops, restarts, reports and removes it.
package service

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Default service names, as GitLab's is gitlab-runner.
const (
	DefaultRunnerService      = "drover"
	DefaultCoordinatorService = "drover-coordinator"
)

// Default stop timeouts. The runner's is long because stopping it drains:
// systemd waits that long for running jobs to finish before it kills what
// is left (GitLab's documentation suggests 7200 s for a graceful
// shutdown). The coordinator closes its listener and finishes requests in
// flight within seconds.
const (
	DefaultRunnerStopTimeout      = 2 * time.Hour
	DefaultCoordinatorStopTimeout = time.Minute
)

// Unit is one systemd service running drover.
type Unit struct {
	// Name is the service name without ".service".
	Name        string
	Description string
	// Exec is the command line: the absolute path of drover, then its
	// arguments.
	Exec []string
	// User and Group run the service; empty: root.
	User, Group string
	// WorkingDirectory is the service's working directory.
	WorkingDirectory string
	// KillSignal stops the service: SIGQUIT for the runner (drain),
	// SIGTERM for the coordinator.
	KillSignal string
	// StopTimeout is how long systemd waits after KillSignal before it
	// sends SIGKILL; 0 waits for ever (TimeoutStopSec=infinity).
	StopTimeout time.Duration
	// KillMode is "mixed" (default: KillSignal to the main process only,
	// then SIGKILL to whatever is left in the unit's cgroup once it has
	// exited) or "process" (nothing but the main process is ever
	// signalled: detached job stages outlive it, to be resumed).
	KillMode string
	// EnvironmentFile, when set, is read for environment variables if it
	// exists (secrets such as DROVER_ADMIN_TOKEN stay out of the unit).
	EnvironmentFile string
	// Hardening adds the sandboxing directives of Sandbox.
	Hardening bool
	Sandbox   Sandbox
}

// Sandbox is the hardening block of a unit.
type Sandbox struct {
	// ProtectSystem is "full" (/usr, /boot and /etc read-only) or
	// "strict" (the whole file system read-only but ReadWritePaths).
	ProtectSystem string
	// ReadWritePaths stay writable under ProtectSystem and ProtectHome
	// (the working directory, the config or data directory).
	ReadWritePaths []string
	// PrivateDevices hides physical devices (not for the runner: a job
	// may need /dev/kvm or /dev/fuse).
	PrivateDevices bool
	// RestrictNamespaces forbids new namespaces (not for the runner: a
	// job may run rootless containers).
	RestrictNamespaces bool
	// NetBindService keeps CAP_NET_BIND_SERVICE for a port under 1024;
	// otherwise a non-root service keeps no capability at all.
	NetBindService bool
}

var serviceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9:_.@-]*$`)

// CheckName returns name without a ".service" suffix, or an error when it
// is no service name.
func CheckName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".service")
	if !serviceName.MatchString(name) || len(name) > 200 {
		return "", fmt.Errorf("service name %q: want letters, digits and :_.@- (as systemd allows)", name)
	}
	return name, nil
}

// FileName is the unit's file name, NAME.service.
func (u Unit) FileName() string { return u.Name + ".service" }

// Render returns the text of the unit's .service file.
func (u Unit) Render() string {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, v) }
	b.WriteString("# Written by drover install; drover uninstall removes it.\n")
	b.WriteString("[Unit]\n")
	line("Description", u.Description)
	line("Documentation", "https://github.com/drover-ci/drover")
	line("After", "network-online.target")
	line("Wants", "network-online.target")
	// Restart=always for ever: no start limit, a crash loop keeps trying
	// every RestartSec (a config.toml not yet written by register, a
	// coordinator not yet reachable).
	line("StartLimitIntervalSec", "0")
	b.WriteString("\n[Service]\n")
	line("Type", "simple")
	quoted := make([]string, len(u.Exec))
	for i, a := range u.Exec {
		quoted[i] = Quote(a)
	}
	line("ExecStart", strings.Join(quoted, " "))
	line("ExecReload", "/bin/kill -HUP $MAINPID")
	if u.User != "" {
		line("User", u.User)
	}
	if u.Group != "" {
		line("Group", u.Group)
	}
	if u.WorkingDirectory != "" {
		line("WorkingDirectory", Quote(u.WorkingDirectory))
	}
	if u.EnvironmentFile != "" {
		line("EnvironmentFile", "-"+Quote(u.EnvironmentFile))
	}
	line("KillSignal", u.KillSignal)
	// Only the main process gets the signal: job processes are its
	// children and the drain waits for them.
	killMode := u.KillMode
	if killMode == "" {
		killMode = "mixed"
	}
	line("KillMode", killMode)
	if u.StopTimeout <= 0 {
		line("TimeoutStopSec", "infinity")
	} else {
		line("TimeoutStopSec", strconv.FormatInt(int64(u.StopTimeout.Round(time.Second)/time.Second), 10)+"s")
	}
	line("Restart", "always")
	line("RestartSec", "5s")
	// Jobs open many files (git, compilers, containers).
	line("LimitNOFILE", "1048576")
	if u.Hardening {
		u.renderSandbox(line)
	}
	b.WriteString("\n[Install]\n")
	line("WantedBy", "multi-user.target")
	return b.String()
}

func (u Unit) renderSandbox(line func(k, v string)) {
	s := u.Sandbox
	line("NoNewPrivileges", "yes")
	line("ProtectSystem", s.ProtectSystem)
	line("ProtectHome", "read-only")
	if len(s.ReadWritePaths) > 0 {
		q := make([]string, len(s.ReadWritePaths))
		for i, p := range s.ReadWritePaths {
			q[i] = Quote(p)
		}
		line("ReadWritePaths", strings.Join(q, " "))
	}
	line("PrivateTmp", "yes")
	if s.PrivateDevices {
		line("PrivateDevices", "yes")
	}
	line("ProtectKernelTunables", "yes")
	line("ProtectKernelModules", "yes")
	line("ProtectKernelLogs", "yes")
	line("ProtectControlGroups", "yes")
	line("ProtectClock", "yes")
	line("RestrictSUIDSGID", "yes")
	line("RestrictRealtime", "yes")
	line("LockPersonality", "yes")
	if s.RestrictNamespaces {
		line("RestrictNamespaces", "yes")
	}
	if u.User != "" && u.User != "root" {
		// A non-root service needs no capability but, for a low port,
		// binding it.
		if s.NetBindService {
			line("AmbientCapabilities", "CAP_NET_BIND_SERVICE")
			line("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE")
		} else {
			line("CapabilityBoundingSet", "")
		}
	}
}

// Quote quotes s as one word of a systemd command line or path list: as
// is when it holds nothing special, else in double quotes with C escapes.
// "%" and "$" are doubled in either case: systemd expands specifiers and
// variables in ExecStart=.
func Quote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\;") {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// RunnerOptions describe the runner manager's service.
type RunnerOptions struct {
	Name             string // default DefaultRunnerService
	Executable       string // absolute path of drover
	User, Group      string
	WorkingDirectory string // absolute
	Config           string // absolute path of config.toml
	StopTimeout      time.Duration
	// KeepJobs makes the unit's KillMode "process": the stages of jobs
	// kept in a job store ([runners.store]) outlive a crash or a kill of
	// drover run, which resumes them when it starts again.
	KeepJobs  bool
	Hardening bool
}

// RunnerUnit is the unit of `drover run --config CONFIG
// --working-directory DIR`. It stops with SIGQUIT, on which drover run
// stops asking for jobs and waits for the running ones (drain), for up to
// StopTimeout. The sandbox keeps what a shell executor's jobs use: /var,
// /opt and /srv stay writable (ProtectSystem=full, not strict), devices
// and namespaces are not restricted; setuid programs (sudo) do not gain
// privileges in jobs (NoNewPrivileges): an operator whose jobs need them
// installs with --hardening=false.
func RunnerUnit(o RunnerOptions) Unit {
	name := o.Name
	if name == "" {
		name = DefaultRunnerService
	}
	return Unit{
		Name:             name,
		Description:      "drover runner manager (" + name + ")",
		Exec:             []string{o.Executable, "run", "--config", o.Config, "--working-directory", o.WorkingDirectory},
		User:             o.User,
		Group:            o.Group,
		WorkingDirectory: o.WorkingDirectory,
		KillSignal:       "SIGQUIT",
		KillMode:         killMode(o.KeepJobs),
		StopTimeout:      o.StopTimeout,
		Hardening:        o.Hardening,
		Sandbox: Sandbox{
			ProtectSystem:  "full",
			ReadWritePaths: dedupe(o.WorkingDirectory, filepath.Dir(o.Config)),
		},
	}
}

func killMode(keepJobs bool) string {
	if keepJobs {
		return "process"
	}
	return "mixed"
}

// CoordinatorOptions describe the coordinator's service.
type CoordinatorOptions struct {
	Name        string // default DefaultCoordinatorService
	Executable  string // absolute path of drover
	User, Group string
	Data        string // absolute data directory, also the working directory
	Listen      string // host:port
	Extra       []string
	StopTimeout time.Duration
	Hardening   bool
}

// CoordinatorUnit is the unit of `drover coordinator --data DATA --listen
// ADDR EXTRA...`, stopped with SIGTERM (it stops listening and finishes
// the requests in flight). Its sandbox is strict: only the data directory
// is writable, no devices, no new namespaces.
func CoordinatorUnit(o CoordinatorOptions) Unit {
	name := o.Name
	if name == "" {
		name = DefaultCoordinatorService
	}
	return Unit{
		Name:             name,
		Description:      "drover coordinator (" + name + ")",
		Exec:             append([]string{o.Executable, "coordinator", "--data", o.Data, "--listen", o.Listen}, o.Extra...),
		User:             o.User,
		Group:            o.Group,
		WorkingDirectory: o.Data,
		EnvironmentFile:  "/etc/default/" + name,
		KillSignal:       "SIGTERM",
		StopTimeout:      o.StopTimeout,
		Hardening:        o.Hardening,
		Sandbox: Sandbox{
			ProtectSystem:      "strict",
			ReadWritePaths:     []string{o.Data},
			PrivateDevices:     true,
			RestrictNamespaces: true,
			NetBindService:     lowPort(o.Listen),
		},
	}
}

// lowPort reports whether addr's port is a privileged one (1-1023).
func lowPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 1024
}

func dedupe(paths ...string) []string {
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		dup := false
		for _, o := range out {
			if o == p {
				dup = true
			}
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out
}
