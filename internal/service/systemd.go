package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrExists is returned by Install when the unit file exists and force
// is not set.
var ErrExists = errors.New("unit file exists")

// Systemctl runs systemctl with args and returns its standard output; a
// failure's error holds its standard error.
type Systemctl func(ctx context.Context, args ...string) (string, error)

// RunSystemctl is the Systemctl of this machine: the systemctl on PATH.
func RunSystemctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "systemctl", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		return string(out), &SystemctlError{Args: args, Err: err, Msg: msg}
	}
	return string(out), nil
}

// SystemctlError is a failed systemctl command.
type SystemctlError struct {
	Args []string
	Err  error
	Msg  string // what it printed
}

func (e *SystemctlError) Error() string {
	s := "systemctl " + strings.Join(e.Args, " ") + ": " + e.Err.Error()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

func (e *SystemctlError) Unwrap() error { return e.Err }

// Manager installs units and drives them.
type Manager struct {
	// UnitDir is where unit files go; default /etc/systemd/system.
	UnitDir string
	// Systemctl runs systemctl; default RunSystemctl.
	Systemctl Systemctl
}

func (m *Manager) unitDir() string {
	if m.UnitDir == "" {
		return "/etc/systemd/system"
	}
	return m.UnitDir
}

func (m *Manager) systemctl(ctx context.Context, args ...string) (string, error) {
	if m.Systemctl == nil {
		return RunSystemctl(ctx, args...)
	}
	return m.Systemctl(ctx, args...)
}

// UnitPath is where the unit file of service name is.
func (m *Manager) UnitPath(name string) string {
	return filepath.Join(m.unitDir(), name+".service")
}

// Install writes u's unit file (refusing, with ErrExists naming the file,
// to replace one unless force), reloads systemd and enables the service,
// so that it starts at boot. It does not start it. It returns the file's
// path.
func (m *Manager) Install(ctx context.Context, u Unit, force bool) (string, error) {
	path := m.UnitPath(u.Name)
	if _, err := os.Lstat(path); err == nil && !force {
		return path, fmt.Errorf("%w: %s (drover uninstall --service %s removes it; --force replaces it)", ErrExists, path, u.Name)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return path, err
	}
	if err := writeAtomic(path, []byte(u.Render()), 0o644); err != nil {
		return path, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := m.systemctl(ctx, "daemon-reload"); err != nil {
		return path, err
	}
	if _, err := m.systemctl(ctx, "enable", u.FileName()); err != nil {
		return path, err
	}
	return path, nil
}

// Uninstall stops the service (a runner drains first), disables it,
// removes its unit file and reloads systemd. A service that is not
// installed is an error naming the file.
func (m *Manager) Uninstall(ctx context.Context, name string) (string, error) {
	path := m.UnitPath(name)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return path, fmt.Errorf("%s is not installed: no %s", name, path)
	}
	unit := name + ".service"
	if _, err := m.systemctl(ctx, "stop", unit); err != nil {
		return path, err
	}
	if _, err := m.systemctl(ctx, "disable", unit); err != nil {
		return path, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return path, err
	}
	if _, err := m.systemctl(ctx, "daemon-reload"); err != nil {
		return path, err
	}
	// Forget a failed state, so that nothing of the unit is listed.
	_, _ = m.systemctl(ctx, "reset-failed", unit)
	return path, nil
}

// Start, Stop and Restart run systemctl start|stop|restart on the
// service; they return when systemd has done it (Stop and Restart of a
// runner wait for its drain).
func (m *Manager) Start(ctx context.Context, name string) error {
	return m.verb(ctx, "start", name)
}

// Stop: see Start.
func (m *Manager) Stop(ctx context.Context, name string) error { return m.verb(ctx, "stop", name) }

// Restart: see Start.
func (m *Manager) Restart(ctx context.Context, name string) error {
	return m.verb(ctx, "restart", name)
}

func (m *Manager) verb(ctx context.Context, verb, name string) error {
	if _, err := os.Lstat(m.UnitPath(name)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is not installed: no %s (drover install writes it)", name, m.UnitPath(name))
	}
	_, err := m.systemctl(ctx, verb, name+".service")
	return err
}

// Status is what systemd says about a service.
type Status struct {
	Name          string
	LoadState     string // loaded, not-found, ...
	ActiveState   string // active, inactive, failed, activating, deactivating, reloading
	SubState      string // running, dead, exited, ...
	UnitFileState string // enabled, disabled, ...
	MainPID       int
	Since         string // when it entered its active state, as systemd says it
}

// Installed reports whether systemd knows the unit.
func (s Status) Installed() bool { return s.LoadState != "" && s.LoadState != "not-found" }

// Active reports whether the service runs, as systemctl is-active's exit
// code 0: active or reloading.
func (s Status) Active() bool { return s.ActiveState == "active" || s.ActiveState == "reloading" }

// ExitCode is what drover status exits with, as systemctl status does
// (LSB): 0 running, 3 not running, 4 not installed.
func (s Status) ExitCode() int {
	switch {
	case !s.Installed():
		return 4
	case s.Active():
		return 0
	}
	return 3
}

// String is a one-line summary: "drover.service: active (running) since
// ..., pid 123, enabled".
func (s Status) String() string {
	if !s.Installed() {
		return s.Name + ".service: not installed"
	}
	line := fmt.Sprintf("%s.service: %s (%s)", s.Name, s.ActiveState, s.SubState)
	if s.Active() && s.Since != "" {
		line += " since " + s.Since
	}
	if s.MainPID > 0 {
		line += ", pid " + strconv.Itoa(s.MainPID)
	}
	if s.UnitFileState != "" {
		line += ", " + s.UnitFileState
	}
	return line
}

// Status asks systemd about the service (systemctl show).
func (m *Manager) Status(ctx context.Context, name string) (Status, error) {
	out, err := m.systemctl(ctx, "show", name+".service", "--property=LoadState,ActiveState,SubState,UnitFileState,MainPID,ActiveEnterTimestamp")
	if err != nil {
		return Status{Name: name}, err
	}
	return parseShow(name, out), nil
}

// parseShow reads systemctl show's KEY=value lines.
func parseShow(name, out string) Status {
	st := Status{Name: name}
	for line := range strings.SplitSeq(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "LoadState":
			st.LoadState = v
		case "ActiveState":
			st.ActiveState = v
		case "SubState":
			st.SubState = v
		case "UnitFileState":
			st.UnitFileState = v
		case "MainPID":
			st.MainPID, _ = strconv.Atoi(v)
		case "ActiveEnterTimestamp":
			st.Since = v
		}
	}
	return st
}

// CheckHost says what this machine lacks for managing services: systemd
// as the init system (/run/systemd/system, as sd_booted checks), and, when
// needRoot, root. runDir is normally "/run/systemd/system".
func CheckHost(runDir string, euid int, needRoot bool) error {
	var errs []error
	if fi, err := os.Stat(runDir); err != nil || !fi.IsDir() {
		errs = append(errs, fmt.Errorf("systemd is not the init system here (%s is missing): run drover run under the init system or process supervisor this machine has instead", runDir))
	}
	if needRoot && euid != 0 {
		errs = append(errs, errors.New("must be run as root (it writes /etc/systemd/system and runs systemctl): run it with sudo"))
	}
	return errors.Join(errs...)
}

// writeAtomic writes data to path under a temporary name and renames it.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
