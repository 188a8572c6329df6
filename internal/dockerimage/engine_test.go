package dockerimage_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
)

// labelRun is on every container, network and image these tests create,
// set to the run's id, so a later run can sweep what a killed one left.
const labelRun = "io.drover.dockerimage-test"

// runID names this test process's objects: unique on a shared engine.
var runID = fmt.Sprintf("%x%x", os.Getpid(), time.Now().UnixNano()&0xffffff)

var seq atomic.Int64

// unique returns a name no other test (or process) uses: prefix-run-n.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, runID, seq.Add(1))
}

// engine returns a client of the local engine, or skips the test when no
// engine answers.
func engine(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli := dockertest.Engine(t)
	sweep(cli)
	return cli
}

// sweep removes what a killed run of these tests left more than an hour
// ago (its cleanups never ran); a run going on now is left alone.
func sweep(cli *dockerclient.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-time.Hour)
	f := filters.NewArgs(filters.Arg("label", labelRun))
	if cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cs {
			if time.Unix(c.Created, 0).Before(old) {
				_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
	}
	if ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f}); err == nil {
		for _, n := range ns {
			if n.Created.Before(old) {
				_ = cli.NetworkRemove(ctx, n.ID)
			}
		}
	}
	if is, err := cli.ImageList(ctx, image.ListOptions{Filters: f}); err == nil {
		for _, i := range is {
			if time.Unix(i.Created, 0).Before(old) {
				for _, tag := range i.RepoTags {
					_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
				}
			}
		}
	}
}

// ensure builds an image under tag with write, removes it at cleanup and
// logs its size and build time.
func ensure(t *testing.T, cli *dockerclient.Client, tag string, write func(*dockerimage.Context) error) {
	t.Helper()
	t.Cleanup(func() { removeImage(t, cli, tag) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	built, err := dockerimage.Ensure(ctx, cli, tag, map[string]string{labelRun: runID}, write)
	if err != nil {
		t.Fatalf("Ensure %s: %v", tag, err)
	}
	if !built {
		t.Fatalf("Ensure %s: the image was there already", tag)
	}
	logImage(t, cli, tag, time.Since(start))
}

func logImage(t *testing.T, cli *dockerclient.Client, tag string, took time.Duration) {
	t.Helper()
	img, err := cli.ImageInspect(t.Context(), tag)
	if err != nil {
		t.Fatalf("inspect %s: %v", tag, err)
	}
	t.Logf("built %s in %s: %.1f MB", tag, took.Round(10*time.Millisecond), float64(img.Size)/1e6)
}

func removeImage(t *testing.T, cli *dockerclient.Client, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove image %s: %v", tag, err)
	}
}

// spec is a container to run.
type spec struct {
	image string
	cmd   []string
	// entrypoint replaces the image's.
	entrypoint []string
	name       string   // "" for a unique one
	binds      []string // host:container[:ro]
	network    string
	detach     bool // start it and return, for a service
}

// run runs a container, removed at cleanup, and returns its exit code and
// output (stdout and stderr). With detach it returns once it started.
func run(t *testing.T, cli *dockerclient.Client, s spec) (int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if s.name == "" {
		s.name = unique("drover-dockerimage-test")
	}
	hc := &container.HostConfig{Binds: s.binds}
	if s.network != "" {
		hc.NetworkMode = container.NetworkMode(s.network)
	}
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: s.image, Cmd: s.cmd, Entrypoint: s.entrypoint, Labels: map[string]string{labelRun: runID},
	}, hc, nil, nil, s.name)
	if err != nil {
		t.Fatalf("create container from %s: %v", s.image, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove container %s: %v", s.name, err)
		}
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start %v in %s: %v", s.cmd, s.image, err)
	}
	if s.detach {
		return 0, ""
	}
	var code int64
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		t.Fatalf("wait for %v: %v", s.cmd, err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs of %v: %v", s.cmd, err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatalf("read logs of %v: %v", s.cmd, err)
	}
	return code, out.String()
}

// expect runs s and fails unless it exits 0 with output containing want.
func expect(t *testing.T, cli *dockerclient.Client, s spec, want string) {
	t.Helper()
	code, out := run(t, cli, s)
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("%v in %s: exit %d, output %q; want exit 0 and %q", s.cmd, s.image, code, out, want)
	}
}

// buildDrover builds ./cmd/drover of this module into a temporary
// directory, with env (NAME=value) added to the build's environment.
func buildDrover(t *testing.T, env ...string) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", gomod, err)
	}
	bin := filepath.Join(t.TempDir(), "drover")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/drover")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/drover: %v\n%s", err, out)
	}
	return bin
}

// gitRepo makes a git repository with one commit in dir/repo.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("cloned by the helper image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "README"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first commit"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// TestHelperImage builds the helper image of a drover binary and runs
// what the docker executor asks of it; then the one a host without a
// static busybox gets.
func TestHelperImage(t *testing.T) {
	t.Parallel()
	cli := engine(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this host")
	}
	bin := buildDrover(t)
	want, err := dockerimage.HelperTag(bin)
	if err != nil || !strings.HasPrefix(want, "drover-helper:") || len(want) != len("drover-helper:")+12 {
		t.Fatalf("HelperTag: %q, %v", want, err)
	}

	tag := unique("drover-dockerimage-test-helper") + ":1"
	t.Cleanup(func() { removeImage(t, cli, tag) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	got, built, err := dockerimage.EnsureHelper(ctx, cli, bin, tag)
	if err != nil || got != tag || !built {
		t.Fatalf("EnsureHelper: %q, built %v, %v", got, built, err)
	}
	logImage(t, cli, tag, time.Since(start))
	img, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[dockerimage.LabelHelper] != "1" || len(img.Config.Entrypoint) != 0 || len(img.Config.Cmd) != 0 {
		t.Errorf("image config: labels %v, entrypoint %v, cmd %v", img.Config.Labels, img.Config.Entrypoint, img.Config.Cmd)
	}
	// Present now: not built again.
	if _, built, err := dockerimage.EnsureHelper(ctx, cli, bin, tag); err != nil || built {
		t.Errorf("second EnsureHelper: built %v, %v", built, err)
	}
	checkHelperImage(t, cli, tag)

	t.Run("without busybox", func(t *testing.T) { helperWithoutBusybox(t, cli, bin) })
}

// helperWithoutBusybox: on a host without a static busybox the helper
// image of drover binary bin is made of the host's bash (as /bin/sh) and
// tools, and does the same work; its sh has pipefail.
func helperWithoutBusybox(t *testing.T, cli *dockerclient.Client, bin string) {
	tag := unique("drover-dockerimage-test-helper-nobusybox") + ":1"
	t.Cleanup(func() { removeImage(t, cli, tag) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	built, err := dockerimage.Ensure(ctx, cli, tag, nil, func(c *dockerimage.Context) error {
		return dockerimage.WriteHelperContextBusybox(c, bin, filepath.Join(t.TempDir(), "no-busybox"))
	})
	if err != nil || !built {
		t.Fatalf("Ensure: built %v, %v", built, err)
	}
	logImage(t, cli, tag, time.Since(start))
	checkHelperImage(t, cli, tag)
	expect(t, cli, spec{image: tag, cmd: []string{"sh", "-c", "set -eo pipefail; test ! -e /bin/busybox; " +
		"mkdir -p /tmp/a/b && echo x > /tmp/a/b/f && mv /tmp/a/b/f /tmp/a/g && cat /tmp/a/g | tr x y | grep -c y && " +
		"sleep 0 && kill -0 $$ && rm -r /tmp/a && ls / >/dev/null && echo tools work"}}, "1\ntools work")
}

// checkHelperImage runs what the docker executor asks of the helper image
// tag: git (with its transports and submodules), sh, drover, the users and
// directories.
func checkHelperImage(t *testing.T, cli *dockerclient.Client, tag string) {
	t.Helper()
	expect(t, cli, spec{image: tag, cmd: []string{"git", "--version"}}, "git version")
	expect(t, cli, spec{image: tag, cmd: []string{"sh", "-c", "echo ok"}}, "ok")
	expect(t, cli, spec{image: tag, cmd: []string{"drover", "version"}}, "drover ")
	expect(t, cli, spec{image: tag, cmd: []string{"sh", "-c", "id nobody && ls -ld /tmp /builds /cache && /usr/bin/env true && echo fine"}}, "fine")
	// The https transport loads (all its libraries are there): it stops
	// at its usage message, not at a missing library.
	code, out := run(t, cli, spec{image: tag, cmd: []string{"/usr/lib/git-core/git-remote-https"}})
	if code == 127 || !strings.Contains(out, "remote-curl") {
		t.Errorf("git-remote-https: exit %d, %q", code, out)
	}

	// Clone over file://: git runs git-upload-pack from its exec path.
	dir := t.TempDir()
	gitRepo(t, dir)
	expect(t, cli, spec{
		image: tag,
		binds: []string{dir + ":/src:ro"},
		cmd: []string{"sh", "-c", "git -c safe.directory='*' clone -q file:///src/repo /builds/r && " +
			"git -C /builds/r log --format=%s && cat /builds/r/README && " +
			"git -C /builds/r submodule status && echo submodule runs"},
	}, "first commit\ncloned by the helper image\nsubmodule runs")
}

// TestDroverImage builds drover's image from a static drover (as
// scripts/images.sh does): it runs drover as uid 1000 by its entrypoint,
// has a shell and its directories, and a rebuilt binary of the same
// version gets a new image under the same tag.
func TestDroverImage(t *testing.T) {
	t.Parallel()
	cli := engine(t)
	bin := buildDrover(t, "CGO_ENABLED=0")
	tag := unique("drover-dockerimage-test-drover") + ":1"
	t.Cleanup(func() { removeImage(t, cli, tag) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if built, err := dockerimage.EnsureDrover(ctx, cli, bin, tag, "9.9.9"); err != nil || !built {
		t.Fatalf("EnsureDrover: built %v, %v", built, err)
	}
	logImage(t, cli, tag, time.Since(start))
	img, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.User != "1000:1000" || len(img.Config.Entrypoint) != 1 || img.Config.Entrypoint[0] != "drover" ||
		img.Config.Labels["org.opencontainers.image.version"] != "9.9.9" || img.Config.Labels[dockerimage.LabelDrover] != "1" {
		t.Errorf("image config: user %q, entrypoint %v, labels %v", img.Config.User, img.Config.Entrypoint, img.Config.Labels)
	}
	if built, err := dockerimage.EnsureDrover(ctx, cli, bin, tag, "9.9.9"); err != nil || built {
		t.Errorf("second EnsureDrover: built %v, %v", built, err)
	}
	expect(t, cli, spec{image: tag, cmd: []string{"version"}}, "drover ")
	expect(t, cli, spec{image: tag, entrypoint: []string{"sh", "-c"},
		cmd: []string{"id -u && touch /var/lib/drover/x /etc/drover/y && pwd && echo $HOME && wget --help 2>&1 | head -1"}},
		"1000\n/var/lib/drover\n/var/lib/drover\nBusyBox")

	// Another binary, same version: the tag moves to a new image.
	other := filepath.Join(t.TempDir(), "drover")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if built, err := dockerimage.EnsureDrover(ctx, cli, other, tag, "9.9.9"); err != nil || !built {
		t.Errorf("EnsureDrover of a changed binary: built %v, %v", built, err)
	}
}

func TestTestImages(t *testing.T) {
	t.Parallel()
	cli := engine(t)
	busybox := unique("drover-dockerimage-test-busybox") + ":1"
	bash := unique("drover-dockerimage-test-bash") + ":1"
	service := unique("drover-dockerimage-test-service") + ":1"
	ensure(t, cli, busybox, dockerimage.WriteBusyboxContext)
	ensure(t, cli, bash, dockerimage.WriteBashContext)
	ensure(t, cli, service, dockerimage.WriteServiceContext)

	expect(t, cli, spec{image: busybox, cmd: []string{"sh", "-c", "id nobody && stat -c %a /tmp && id drover"}}, "1777\nuid=1000(drover)")
	expect(t, cli, spec{image: bash, cmd: []string{"bash", "--version"}}, "GNU bash")
	expect(t, cli, spec{image: bash, cmd: []string{"bash", "-c", "[[ -x /usr/bin/env ]] && echo bash runs busybox"}}, "bash runs busybox")

	// The service answers on 8080, by its name, on a user-defined network.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	netName := unique("drover-dockerimage-test-net")
	n, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{Driver: "bridge", Labels: map[string]string{labelRun: runID}})
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove network %s: %v", netName, err)
		}
	})
	svcName := unique("drover-dockerimage-test-svc")
	run(t, cli, spec{image: service, name: svcName, network: netName, detach: true})
	expect(t, cli, spec{
		image:   busybox,
		network: netName,
		cmd:     []string{"sh", "-c", "for i in $(seq 1 50); do wget -qO- http://" + svcName + ":8080/ && exit 0; sleep 0.2; done; exit 1"},
	}, strings.TrimSpace(dockerimage.ServiceText))
}
