// Package systemdtest runs Debian with systemd as PID 1 in a Docker
// container, for tests of what drover installs as a service (the units of
// drover install, the .deb package's scripts) against a real systemd.
//
// The image is a Debian bookworm root made with debootstrap (minbase,
// systemd-sysv, dbus, procps), cached as a tar in the cache directory
// ($DROVER_CACHE_DIR, else ~/.cache/drover) and imported once per engine
// (see internal/debroot). A container runs /sbin/init with the privileges
// systemd needs in a container on a cgroup v1 or v2 host: every
// capability but CAP_SYS_RESOURCE (which the engine's bounding set may
// lack), no seccomp or AppArmor profile, the host's cgroup namespace and
// /sys/fs/cgroup, and tmpfs on /run and /run/lock.
package systemdtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/drover-ci/drover/internal/debroot"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
)

// The root's recipe. Bump rootVersion when it changes in a way Packages
// does not show, so that cached roots of the old recipe are not reused.
const (
	suite       = "bookworm"
	mirror      = "http://deb.debian.org/debian"
	rootVersion = "v1"
)

// packages are installed on top of minbase: systemd as init, dbus (which
// systemctl and logind expect on a real system), procps (ps and pgrep for
// the tests' checks).
var packages = []string{"dbus", "procps", "systemd-sysv"}

// Label is on the image and on every container Start makes, set to "1",
// so that leftovers of a killed test run can be found.
const Label = "io.drover.systemdtest"

// Tag is the tag of the systemd test image.
func Tag() string {
	return fmt.Sprintf("drover-systemd:%s-%s-%s", suite, rootVersion, debroot.Key(append([]string{suite, mirror, rootVersion}, packages...)...))
}

// EnsureImage makes sure the engine has the image Tag, importing the
// cached Debian root, and making that first with debootstrap when the
// cache has none (errors.Is(err, debroot.ErrNoDebootstrap) when this
// machine cannot). progress, when not nil, gets a line per step.
func EnsureImage(ctx context.Context, cli *dockerclient.Client, progress func(string)) (string, error) {
	tag := Tag()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("systemd image: inspect %s: %w", tag, err)
	}
	key := debroot.Key(append([]string{suite, mirror, rootVersion}, packages...)...)
	root, err := debroot.Ensure(ctx, debroot.Recipe{
		Suite: suite, Mirror: mirror, Packages: packages, Trim: debroot.DefaultTrim,
		File: fmt.Sprintf("debian-%s-systemd-%s-%s.tar", suite, rootVersion, key),
	}, progress)
	if err != nil {
		return "", fmt.Errorf("systemd image: %w", err)
	}
	if progress != nil {
		progress("importing " + root + " as " + tag)
	}
	if err := debroot.ImportImage(ctx, cli, root, tag, []string{
		"LABEL " + Label + "=1",
		// systemd's own way of knowing it is in a container.
		"ENV container=docker",
		`CMD ["/sbin/init"]`,
	}, "drover: debootstrap "+suite+" "+strings.Join(packages, ",")); err != nil {
		return "", fmt.Errorf("systemd image: %w", err)
	}
	return tag, nil
}

// Container is a running container with systemd as PID 1.
type Container struct {
	cli *dockerclient.Client
	// ID is the container's id.
	ID string
	// IP is its address on the engine's default bridge, which the host
	// reaches.
	IP string
}

// Start starts a container of the systemd image, waits until systemd
// says the system is running, and removes the container when the test
// ends. It skips the test when there is no Docker engine or the image
// cannot be made here (no debootstrap, not root), and fails it when
// systemd does not come up.
func Start(t testing.TB) *Container {
	t.Helper()
	cli := dockertest.Engine(t)
	ctx := t.Context()
	tag, err := EnsureImage(ctx, cli, func(s string) { t.Log("systemd image: " + s) })
	if errors.Is(err, debroot.ErrNoDebootstrap) {
		t.Skipf("no systemd test image: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := run(ctx, cli, tag)
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				out, _, _ := c.Exec(context.WithoutCancel(ctx), "journalctl", "--no-pager", "-n", "200")
				t.Logf("journal of the systemd container (last 200 lines):\n%s", out)
			}
			c.Remove(context.WithoutCancel(ctx))
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run creates and starts a container of tag and waits for systemd.
func run(ctx context.Context, cli *dockerclient.Client, tag string) (*Container, error) {
	cfg := &container.Config{Image: tag, Labels: map[string]string{Label: "1"}, StopSignal: "SIGRTMIN+3"}
	host := &container.HostConfig{
		CapAdd:       []string{"ALL"},
		CapDrop:      []string{"SYS_RESOURCE"},
		SecurityOpt:  []string{"seccomp=unconfined", "apparmor=unconfined"},
		CgroupnsMode: container.CgroupnsModeHost,
		Binds:        []string{"/sys/fs/cgroup:/sys/fs/cgroup:rw"},
		Tmpfs:        map[string]string{"/run": "rw,exec", "/run/lock": "rw"},
	}
	created, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("create the systemd container: %w", err)
	}
	c := &Container{cli: cli, ID: created.ID}
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return c, fmt.Errorf("start the systemd container: %w", err)
	}
	ins, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		return c, fmt.Errorf("inspect the systemd container: %w", err)
	}
	if ins.NetworkSettings != nil {
		if n := ins.NetworkSettings.Networks["bridge"]; n != nil {
			c.IP = n.IPAddress
		}
	}
	if c.IP == "" {
		return c, fmt.Errorf("the systemd container has no address on the engine's bridge network")
	}
	// --wait returns when the boot is done (or failed): no polling.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a safety net only
	defer cancel()
	var out string
	for {
		out, _, err = c.Exec(wctx, "systemctl", "is-system-running", "--wait")
		// Until systemd has made its socket systemctl cannot ask it; and
		// until it has made /run/systemd/system (sd_booted), systemctl
		// says "offline" without asking: both are the boot not yet begun,
		// as long as the container runs.
		notYet := err != nil && strings.Contains(err.Error(), "Failed to connect to bus") ||
			strings.TrimSpace(out) == "offline"
		if !notYet {
			break
		}
		if ins, ierr := cli.ContainerInspect(ctx, c.ID); ierr == nil && ins.State != nil && !ins.State.Running {
			logs := containerLogs(ctx, cli, c.ID)
			return c, fmt.Errorf("the systemd container exited with code %d before systemd came up; its output:\n%s", ins.State.ExitCode, logs)
		}
		select {
		case <-wctx.Done():
			return c, fmt.Errorf("systemd in the container: not booting within 2 minutes (last answer %q): %w", strings.TrimSpace(out), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if state := strings.TrimSpace(out); state != "running" {
		failed, _, _ := c.Exec(ctx, "systemctl", "--failed", "--no-pager", "--no-legend")
		return c, fmt.Errorf("systemd in the container is %q, want running (%v); failed units:\n%s", state, err, failed)
	}
	return c, nil
}

// Remove removes the container and its anonymous volumes.
func (c *Container) Remove(ctx context.Context) {
	_ = c.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// ExitError is the error of a command that ran and exited with a code
// other than 0.
type ExitError struct {
	Cmd    []string
	Code   int
	Stderr string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s: exit code %d: %s", strings.Join(e.Cmd, " "), e.Code, strings.TrimSpace(e.Stderr))
}

// Exec runs cmd in the container as root and returns its standard output
// and error. A command that exits with a code other than 0 returns an
// *ExitError.
func (c *Container) Exec(ctx context.Context, cmd ...string) (stdout, stderr string, err error) {
	return c.ExecAs(ctx, "", nil, cmd...)
}

// ExecAs is Exec as user (name or uid; "" is root) with env (NAME=value)
// added to the environment.
func (c *Container) ExecAs(ctx context.Context, user string, env []string, cmd ...string) (stdout, stderr string, err error) {
	ex, err := c.cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{
		Cmd: cmd, User: user, Env: env, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", "", fmt.Errorf("exec %s: %w", strings.Join(cmd, " "), err)
	}
	att, err := c.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", "", fmt.Errorf("exec %s: %w", strings.Join(cmd, " "), err)
	}
	defer att.Close()
	var o, e bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&o, &e, att.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		return o.String(), e.String(), fmt.Errorf("exec %s: %w", strings.Join(cmd, " "), ctx.Err())
	}
	if err != nil {
		return o.String(), e.String(), fmt.Errorf("exec %s: read output: %w", strings.Join(cmd, " "), err)
	}
	ins, err := c.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return o.String(), e.String(), fmt.Errorf("exec %s: %w", strings.Join(cmd, " "), err)
	}
	if ins.ExitCode != 0 {
		return o.String(), e.String(), &ExitError{Cmd: cmd, Code: ins.ExitCode, Stderr: e.String()}
	}
	return o.String(), e.String(), nil
}

// ExitCode is the exit code err carries: 0 for nil, an *ExitError's code,
// -1 for any other error (the command did not run or was not waited for).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return -1
}

// WriteFile writes data to name (an absolute path) in the container with
// mode, owned by root; the parent directory must exist.
func (c *Container) WriteFile(ctx context.Context, name string, data []byte, mode int64) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path.Base(name), Mode: mode, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := c.cli.CopyToContainer(ctx, c.ID, path.Dir(name), &buf, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("copy %s into the container: %w", name, err)
	}
	return nil
}

// CopyFile copies the host file src to name in the container with mode.
func (c *Container) CopyFile(ctx context.Context, src, name string, mode int64) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, name, data, mode)
}

// ReadFile reads name in the container.
func (c *Container) ReadFile(ctx context.Context, name string) ([]byte, error) {
	rc, _, err := c.cli.CopyFromContainer(ctx, c.ID, name)
	if err != nil {
		return nil, fmt.Errorf("copy %s from the container: %w", name, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("copy %s from the container: %w", name, err)
	}
	return io.ReadAll(tr)
}

// containerLogs returns the output of container id (systemd's boot
// messages), or why it cannot.
func containerLogs(ctx context.Context, cli *dockerclient.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = stdcopy.StdCopy(&b, &b, rc)
	return b.String()
}
