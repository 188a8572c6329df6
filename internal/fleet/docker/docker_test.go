package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/docker"
	"github.com/drover-ci/drover/internal/fleet/fleettest"
)

// testImage is built once per test binary, by the first test that needs it.
const testImage = docker.DefaultImage

var (
	imageOnce sync.Once
	imageErr  error
)

// engine returns a client for the local Docker engine with the test image
// built, or skips the test when there is no engine.
func engine(t *testing.T) *dockerclient.Client {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Skip("no /usr/sbin/sshd on this machine: cannot build the sshd image")
	}
	cli := dockertest.Engine(t)
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sweep(ctx, cli)
		imageErr = docker.EnsureImage(ctx, cli, testImage)
	})
	if imageErr != nil {
		t.Fatalf("EnsureImage: %v", imageErr)
	}
	return cli
}

// sweep removes containers that an earlier, killed run of these tests
// left behind (their cleanups never ran). Test owners start with "test-".
func sweep(ctx context.Context, cli *dockerclient.Client) {
	list, err := cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner)),
	})
	if err != nil {
		return
	}
	for _, c := range list {
		if strings.HasPrefix(c.Labels[docker.LabelOwner], "test-") {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
}

// removeOwned removes every container labelled with owner, at cleanup.
func removeOwned(t *testing.T, cli *dockerclient.Client, owner string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		for _, c := range ownedContainers(t, cli, owner) {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	})
}

func ownedContainers(t *testing.T, cli *dockerclient.Client, owner string) []container.Summary {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner+"="+owner)),
	})
	if err != nil {
		t.Fatalf("ContainerList: %v", err)
	}
	return list
}

// runSSH logs in with ci and runs cmd, returning its output.
func runSSH(t *testing.T, ci fleet.ConnectInfo, cmd string) string {
	t.Helper()
	client, err := dialSSH(ci)
	if err != nil {
		t.Fatalf("ssh to %s: %v", ci.Addr(false), err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("run %q: %v (output %q)", cmd, err, out)
	}
	return string(out)
}

// dialSSH logs in with ci's key. sshd may still be starting in a fresh
// container, so the dial is retried for up to 10 seconds.
func dialSSH(ci fleet.ConnectInfo) (*ssh.Client, error) {
	signer, err := ssh.ParsePrivateKey(ci.Key)
	if err != nil {
		return nil, fmt.Errorf("parse ConnectInfo.Key: %w", err)
	}
	cfg := &ssh.ClientConfig{
		User:            ci.Username,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         5 * time.Second,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		client, err := ssh.Dial("tcp", ci.Addr(false), cfg)
		if err == nil || time.Now().After(deadline) {
			return client, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProviderLifecycle(t *testing.T) {
	cli := engine(t)
	ctx := t.Context()
	owner := fmt.Sprintf("test-lifecycle-%d", time.Now().UnixNano())
	removeOwned(t, cli, owner)

	p := docker.New(nil, cli)
	info, err := p.Init(ctx, fleet.Settings{Name: owner, Config: map[string]any{"image": testImage, "max_size": int64(3)}})
	if err != nil {
		t.Fatalf("Init = %v", err)
	}
	if info.MaxSize != 3 || info.ID != "docker/"+owner {
		t.Errorf("Init = %+v, want MaxSize 3, ID docker/%s", info, owner)
	}

	n, err := p.Increase(ctx, 2)
	if n != 2 || err != nil {
		t.Fatalf("Increase(2) = %d, %v; want 2, nil", n, err)
	}
	got := fleettest.States(t, p)
	if len(got) != 2 {
		t.Fatalf("Update reported %v, want 2 instances", got)
	}
	var ids []string
	for id, st := range got {
		if st != fleet.StateRunning {
			t.Errorf("instance %s is %s, want running", id, st)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)

	for _, id := range ids {
		ci, err := p.ConnectInfo(ctx, id)
		if err != nil {
			t.Fatalf("ConnectInfo(%s) = %v", id, err)
		}
		if ci.Username != docker.ImageUser || ci.Protocol != "ssh" {
			t.Errorf("ConnectInfo(%s) = user %q protocol %q", id, ci.Username, ci.Protocol)
		}
		if out := runSSH(t, ci, "echo hello"); out != "hello\n" {
			t.Errorf("ssh %s echo hello = %q, want %q", id, out, "hello\n")
		}
		if err := p.Heartbeat(ctx, id); err != nil {
			t.Errorf("Heartbeat(%s) = %v", id, err)
		}
	}
	// The image has bash for the shell executor's scripts, and the
	// busybox tools.
	ci0, _ := p.ConnectInfo(ctx, ids[0])
	if out := runSSH(t, ci0, `bash -c 'echo "$0 $(id -un) $(ls -d /tmp)"'`); out != "bash drover /tmp\n" {
		t.Errorf("bash in the container = %q, want %q", out, "bash drover /tmp\n")
	}

	// max_size 3 leaves room for one more.
	n, err = p.Increase(ctx, 5)
	if n != 1 {
		t.Errorf("Increase(5) at 2 of max 3 = %d, %v; want 1", n, err)
	}

	// A second provider with the same owner sees the same containers.
	p2 := docker.New(nil, cli)
	if _, err := p2.Init(ctx, fleet.Settings{Name: owner, Config: map[string]any{"image": testImage}}); err != nil {
		t.Fatalf("second Init = %v", err)
	}
	got2 := fleettest.States(t, p2)
	if len(got2) != 3 {
		t.Errorf("second provider reported %v, want the 3 instances", got2)
	}
	// It can reach an adopted container with its own key.
	ci, err := p2.ConnectInfo(ctx, ids[0])
	if err != nil {
		t.Fatalf("adopted ConnectInfo = %v", err)
	}
	if out := runSSH(t, ci, "echo adopted"); out != "adopted\n" {
		t.Errorf("ssh to adopted container = %q", out)
	}

	// A provider of another owner sees none of them and cannot touch them.
	other := docker.New(nil, cli)
	if _, err := other.Init(ctx, fleet.Settings{Name: owner + "-other", Config: map[string]any{}}); err != nil {
		t.Fatalf("other Init = %v", err)
	}
	if g := fleettest.States(t, other); len(g) != 0 {
		t.Errorf("other owner's Update reported %v, want none", g)
	}
	if err := other.Heartbeat(ctx, ids[0]); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("other owner's Heartbeat = %v, want ErrNotFound", err)
	}

	all := slices.Collect(func(yield func(string) bool) {
		for id := range got2 {
			if !yield(id) {
				return
			}
		}
	})
	removed, err := p.Decrease(ctx, all)
	if err != nil || len(removed) != 3 {
		t.Fatalf("Decrease = %v, %v; want 3 removed", removed, err)
	}
	for _, id := range all {
		if _, err := cli.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
			t.Errorf("container %s after Decrease: inspect = %v, want not found", id, err)
		}
	}
	after := fleettest.States(t, p)
	for _, id := range ids {
		if after[id] != fleet.StateDeleted {
			t.Errorf("Update after Decrease: %s is %q, want deleted", id, after[id])
		}
	}
	if again := fleettest.States(t, p); len(again) != 0 {
		t.Errorf("second Update after Decrease reported %v, want nothing", again)
	}
	if left := ownedContainers(t, cli, owner); len(left) != 0 {
		t.Errorf("%d containers left after Decrease", len(left))
	}
	if err := p.Heartbeat(ctx, ids[0]); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("Heartbeat of a removed container = %v, want ErrNotFound", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}

func TestStoppedContainerTimesOut(t *testing.T) {
	cli := engine(t)
	ctx := t.Context()
	owner := fmt.Sprintf("test-stopped-%d", time.Now().UnixNano())
	removeOwned(t, cli, owner)
	p := docker.New(nil, cli)
	if _, err := p.Init(ctx, fleet.Settings{Name: owner, Config: map[string]any{}}); err != nil {
		t.Fatalf("Init = %v", err)
	}
	if n, err := p.Increase(ctx, 1); n != 1 {
		t.Fatalf("Increase(1) = %d, %v", n, err)
	}
	var id string
	for i := range fleettest.States(t, p) {
		id = i
	}
	zero := 0
	if err := cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatalf("ContainerStop: %v", err)
	}
	if st := fleettest.States(t, p)[id]; st != fleet.StateTimeout {
		t.Errorf("stopped container is %q, want timeout", st)
	}
	if err := p.Heartbeat(ctx, id); err == nil {
		t.Error("Heartbeat of a stopped container = nil, want an error")
	}
}

func TestInitRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"unknown key", map[string]any{"imagee": "x"}, "imagee: unknown key"},
		{"image type", map[string]any{"image": 3}, "image: want a string"},
		{"negative max", map[string]any{"max_size": int64(-1)}, "max_size: -1 is negative"},
		{"max type", map[string]any{"max_size": "3"}, "max_size: want an integer"},
		{"address", map[string]any{"address": "public"}, "address: \"public\""},
		{"keys path", map[string]any{"authorized_keys_path": "keys"}, "authorized_keys_path: \"keys\" is not absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := docker.New(nil, nil)
			_, err := p.Init(t.Context(), fleet.Settings{Name: "x", Config: tt.cfg})
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.want)) {
				t.Errorf("Init(%v) = %v, want an error containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

// BenchmarkInstanceLifecycle measures one container from Increase to a
// working SSH login to its removal.
func BenchmarkInstanceLifecycle(b *testing.B) {
	cli := dockertest.Engine(b)
	ctx := b.Context()
	if err := docker.EnsureImage(ctx, cli, testImage); err != nil {
		b.Fatalf("EnsureImage: %v", err)
	}
	owner := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	p := docker.New(nil, cli)
	if _, err := p.Init(ctx, fleet.Settings{Name: owner, Config: map[string]any{}}); err != nil {
		b.Fatalf("Init: %v", err)
	}
	b.Cleanup(func() {
		list, _ := cli.ContainerList(context.Background(), container.ListOptions{
			All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner+"="+owner)),
		})
		for _, c := range list {
			_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
	})
	for b.Loop() {
		if n, err := p.Increase(ctx, 1); n != 1 {
			b.Fatalf("Increase(1) = %d, %v", n, err)
		}
		var id string
		_ = p.Update(ctx, func(i string, st fleet.State) {
			if st != fleet.StateDeleted {
				id = i
			}
		})
		ci, err := p.ConnectInfo(ctx, id)
		if err != nil {
			b.Fatalf("ConnectInfo: %v", err)
		}
		if err := sshEcho(ci); err != nil {
			b.Fatalf("ssh: %v", err)
		}
		if _, err := p.Decrease(ctx, []string{id}); err != nil {
			b.Fatalf("Decrease: %v", err)
		}
	}
}

// sshEcho logs in with ci and runs echo.
func sshEcho(ci fleet.ConnectInfo) error {
	client, err := dialSSH(ci)
	if err != nil {
		return err
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	_, err = sess.Output("echo hi")
	return err
}
