package hcloudtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet/docker"
)

// Machines boots and stops the real machines behind the stand-in's
// servers. The stand-in calls Start once per server, in the background,
// at most four operations at a time, and Stop once when the server is
// deleted (after Start returned) and at Close for every server left.
type Machines interface {
	// Start boots a machine for the server called name that accepts SSH
	// logins on port 22 with any of authorizedKeys (authorized_keys
	// lines) as user root, and returns its IPv4 address, reachable from
	// this host. It returns when sshd answers. When it fails (or ctx
	// ends) it leaves no machine behind.
	Start(ctx context.Context, name string, authorizedKeys []string) (ip string, err error)
	// Stop stops and removes the machine of the server called name. A
	// name with no machine is not an error.
	Stop(ctx context.Context, name string) error
}

// Labels on the containers DockerMachines starts.
const (
	// LabelMachine is on every container, with the run's ID as value:
	// `docker rm -f $(docker ps -aq --filter label=io.drover.hcloudtest)`
	// removes them all.
	LabelMachine = "io.drover.hcloudtest"
	// LabelServer holds the name of the server the container is.
	LabelServer = "io.drover.hcloudtest.server"
	// labelPID and labelHost name the test process that started the
	// container, so that a later run removes what a killed one left.
	labelPID  = "io.drover.hcloudtest.pid"
	labelHost = "io.drover.hcloudtest.host"
)

// imageUsers are the users of the sshd image whose authorized_keys a
// machine gets: root, whom Hetzner's images authorise, and the image's
// unprivileged user.
var imageUsers = []string{"root", docker.ImageUser}

// DockerOptions are the machines DockerMachinesWith starts.
type DockerOptions struct {
	// Image is the machines' image. "" means docker.DefaultImage (sshd
	// only, built when missing), or docker.DefaultDindImage when Engine is
	// set (built when missing, which takes minutes the first time on a
	// machine). Another image must exist on the engine, run sshd on port
	// 22 and authorise the keys in /etc/ssh/authorized_keys/<user> for
	// root and docker.ImageUser, as both of those do.
	Image string
	// Engine makes every machine run its own Docker engine, as the docker
	// fleet provider's engine instances do (engine = true): the container
	// gets the capabilities, device access and cgroup tree dockerd needs,
	// without --privileged, and /var/lib/docker as an anonymous volume
	// removed with it. The image must start dockerd the way
	// docker.DefaultDindImage does (DROVER_CGROUP_PARENT,
	// DROVER_DOCKERD_ARGS). The engine answers a few seconds after sshd:
	// Start does not wait for it.
	Engine bool
	// EngineArgs are more dockerd flags for Engine machines, one flag a
	// value ("--insecure-registry=172.17.0.1:5000").
	EngineArgs []string
}

var (
	setupMu   sync.Mutex
	setupDone = map[string]error{} // image -> result of building it
)

// DockerMachines returns Machines whose machines are containers of
// drover's sshd test image (docker.DefaultImage, built when missing) on
// the local Docker engine's default bridge, so that their IPs are
// reachable from this host. It skips t when there is no engine, no
// /usr/sbin/sshd to build the image from, or the image cannot be built.
// The containers it started are removed when t ends, and the first call
// in a process removes those a killed earlier run on this host left.
func DockerMachines(t testing.TB) Machines {
	t.Helper()
	return DockerMachinesWith(t, DockerOptions{})
}

// DockerMachinesWith is DockerMachines with the machines o describes: an
// image of the test's choosing, or machines that run a Docker engine of
// their own (o.Engine). It skips t as DockerMachines does, also when
// o.Image is missing or the engine image cannot be built here (no root or
// debootstrap, no Debian mirror).
func DockerMachinesWith(t testing.TB, o DockerOptions) Machines {
	t.Helper()
	if o.Image == "" {
		o.Image = docker.DefaultImage
		if o.Engine {
			o.Image = docker.DefaultDindImage
		}
	}
	if o.Image == docker.DefaultImage {
		if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
			t.Skip("hcloudtest: no /usr/sbin/sshd on this machine: cannot build the sshd image the machines run")
		}
	}
	cli := dockertest.Engine(t)
	if err := ensureImage(t, cli, o.Image); err != nil {
		t.Skipf("hcloudtest: machine image %s: %v", o.Image, err)
	}
	run := make([]byte, 6)
	_, _ = rand.Read(run)
	m := &dockerMachines{cli: cli, opts: o, run: hex.EncodeToString(run), names: map[string]string{}}
	t.Cleanup(m.removeAll)
	return m
}

// ensureImage sweeps the containers of killed runs (once a process) and
// makes sure image exists, building drover's own images once a process.
func ensureImage(t testing.TB, cli *dockerclient.Client, image string) error {
	setupMu.Lock()
	defer setupMu.Unlock()
	if err, ok := setupDone[image]; ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if len(setupDone) == 0 {
		sweepOrphans(ctx, cli)
	}
	var err error
	switch image {
	case docker.DefaultImage:
		err = docker.EnsureImage(ctx, cli, image)
	case docker.DefaultDindImage:
		err = docker.EnsureDindImage(ctx, cli, image, func(s string) { t.Logf("hcloudtest: %s", s) })
	default:
		if _, ierr := cli.ImageInspect(ctx, image); ierr != nil {
			err = fmt.Errorf("not on the engine: %w", ierr)
		}
	}
	setupDone[image] = err
	return err
}

type dockerMachines struct {
	cli  *dockerclient.Client
	opts DockerOptions
	run  string

	mu    sync.Mutex
	names map[string]string // server name -> container ID
}

func (m *dockerMachines) Start(ctx context.Context, name string, keys []string) (ip string, err error) {
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	cname := "hcloudtest-" + sanitize(name) + "-" + hex.EncodeToString(suffix)
	host, _ := os.Hostname()
	cfg := &container.Config{
		Image:    m.opts.Image,
		Hostname: name[max(0, len(name)-63):],
		Labels: map[string]string{
			LabelMachine: m.run, LabelServer: name,
			labelPID: strconv.Itoa(os.Getpid()), labelHost: host,
		},
	}
	hostCfg := &container.HostConfig{}
	if m.opts.Engine {
		engineRun(cname, m.opts.EngineArgs, cfg, hostCfg)
	}
	created, err := m.cli.ContainerCreate(ctx, cfg, hostCfg, nil, nil, cname)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", cname, err)
	}
	defer func() {
		if err == nil {
			return
		}
		// Remove even when ctx is what failed: the contract is no
		// machine left behind.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rmErr := removeMachine(rmCtx, m.cli, created.ID); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
	}()
	lines := strings.Join(keys, "\n") + "\n"
	for _, user := range imageUsers {
		archive, err := dockerimage.FileTar("etc/ssh/authorized_keys/"+user, 0o644, []byte(lines))
		if err != nil {
			return "", err
		}
		if err := m.cli.CopyToContainer(ctx, created.ID, "/", archive, container.CopyToContainerOptions{}); err != nil {
			return "", fmt.Errorf("copy authorized keys into %s: %w", cname, err)
		}
	}
	if err := m.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("start container %s: %w", cname, err)
	}
	c, err := m.cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		return "", fmt.Errorf("inspect container %s: %w", cname, err)
	}
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.IPAddress != "" {
				ip = n.IPAddress
				break
			}
		}
	}
	if ip == "" {
		return "", fmt.Errorf("container %s has no IP address", cname)
	}
	if err := waitSSH(ctx, net.JoinHostPort(ip, "22")); err != nil {
		return "", fmt.Errorf("container %s: %w", cname, err)
	}
	m.mu.Lock()
	m.names[name] = created.ID
	m.mu.Unlock()
	return ip, nil
}

// waitSSH waits until addr greets with an SSH banner: sshd starts within
// milliseconds of the container, but after ContainerStart returns.
func waitSSH(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := docker.CheckSSHBanner(ctx, addr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sshd does not answer: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *dockerMachines) Stop(ctx context.Context, name string) error {
	m.mu.Lock()
	id, ok := m.names[name]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	if err := removeMachine(ctx, m.cli, id); err != nil {
		return fmt.Errorf("server %s: %w", name, err)
	}
	m.mu.Lock()
	delete(m.names, name)
	m.mu.Unlock()
	return nil
}

// removeAll removes every container of this run, at the end of the test.
func (m *dockerMachines) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := m.cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelMachine+"="+m.run)),
	})
	if err != nil {
		return
	}
	for _, c := range list {
		_ = removeMachine(ctx, m.cli, c.ID)
	}
}

// sweepOrphans removes the containers of test processes on this host
// that no longer run (killed before their cleanup).
func sweepOrphans(ctx context.Context, cli *dockerclient.Client) {
	host, _ := os.Hostname()
	list, err := cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelMachine)),
	})
	if err != nil {
		return
	}
	for _, c := range list {
		pid, err := strconv.Atoi(c.Labels[labelPID])
		if err != nil || c.Labels[labelHost] != host || processAlive(pid) {
			continue
		}
		_ = removeMachine(ctx, cli, c.ID)
	}
}

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	// EPERM: it runs, as another user.
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sanitize keeps the characters Docker allows in a container name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '_'
	}, s)
}
