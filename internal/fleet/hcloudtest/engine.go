package hcloudtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	dockerclient "github.com/docker/docker/client"
)

// Engine machines (DockerOptions.Engine) are run the way the docker fleet
// provider runs its engine instances (internal/fleet/docker, engineRun):
// what follows mirrors it, because the stand-in must not depend on that
// provider's unexported code and its machines must behave like its
// instances.

// labelCgroupParent is on an engine machine's container and holds the
// cgroup parent of its inner engine, so that removing the machine also
// removes what the inner engine made in this host's cgroup tree.
const labelCgroupParent = "io.drover.hcloudtest.cgroup-parent"

// cgroupTop is the first element of every engine machine's cgroup
// parent; the docker provider's is "drover-fleet", so neither removes the
// other's.
const cgroupTop = "hcloudtest"

// engineRun adds to a new container's configuration what a machine named
// cname needs to run its own dockerd: every capability but
// CAP_SYS_RESOURCE (--privileged fails where the engine's bounding set
// lacks one), no seccomp or AppArmor profile, unmasked /proc and /sys,
// every device, the host's cgroup tree, and /var/lib/docker as an
// anonymous volume (overlay2 cannot sit on an overlay root).
func engineRun(cname string, args []string, cfg *container.Config, host *container.HostConfig) {
	parent := cgroupTop + "/" + cname
	cfg.Labels[labelCgroupParent] = parent
	cfg.Env = append(cfg.Env,
		"DROVER_CGROUP_PARENT="+parent,
		"DROVER_DOCKERD_ARGS="+strings.Join(args, "\n"))
	host.CapAdd = []string{"ALL"}
	host.CapDrop = []string{"SYS_RESOURCE"}
	host.SecurityOpt = []string{"seccomp=unconfined", "apparmor=unconfined"}
	// Empty, not nil: replaces the engine's default masked and read-only
	// paths (the CLI's --security-opt systempaths=unconfined).
	host.MaskedPaths = []string{}
	host.ReadonlyPaths = []string{}
	host.DeviceCgroupRules = []string{"a *:* rwm"}
	host.Binds = append(host.Binds, "/sys/fs/cgroup:/sys/fs/cgroup:rw")
	host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Target: "/var/lib/docker"})
}

// removeMachine force-removes a machine's container with its anonymous
// volumes and, for an engine machine, the cgroups its inner engine made.
// A container that is gone is not an error.
func removeMachine(ctx context.Context, cli *dockerclient.Client, id string) error {
	c, err := cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect container %s: %w", id, err)
	}
	var parent string
	var bases []string
	if c.Config != nil {
		parent = c.Config.Labels[labelCgroupParent]
	}
	if parent != "" && c.State != nil && c.State.Pid > 0 {
		// Read before the removal: the machine's own cgroups, under
		// which the inner engine's are in each cgroup v1 hierarchy.
		bases = processCgroups(c.State.Pid)
	}
	if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if parent == "" || !validCgroupParent(parent) || !localEngine(cli) {
		return nil
	}
	if err := removeCgroupDirs(ctx, cgroupDirs("/sys/fs/cgroup", parent, bases)); err != nil {
		return fmt.Errorf("container %s removed, its engine's cgroups not: %w", id, err)
	}
	return nil
}

// localEngine reports whether the engine runs on this machine (a unix
// socket), so that its cgroup tree is this machine's.
func localEngine(cli *dockerclient.Client) bool {
	h := cli.DaemonHost()
	return h == "" || strings.HasPrefix(h, "unix://")
}

func validCgroupParent(parent string) bool {
	rest, ok := strings.CutPrefix(parent, cgroupTop+"/")
	return ok && rest != "" && !strings.Contains(rest, "/") && rest != ".." && rest != "." && path.Clean(parent) == parent
}

// processCgroups returns the cgroup paths of process pid, one per
// hierarchy ("/docker/<id>").
func processCgroups(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	var paths []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/") && !slices.Contains(paths, parts[2]) {
			paths = append(paths, parts[2])
		}
	}
	return paths
}

// cgroupDirs lists the directories an inner engine with cgroup parent
// parent may have made: under the machine's own cgroup (bases) in each
// cgroup v1 hierarchy, or under the root of a cgroup v2 (or hybrid
// unified) hierarchy, which no engine cleans.
func cgroupDirs(root, parent string, bases []string) []string {
	hierarchies := []string{root}
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				hierarchies = append(hierarchies, filepath.Join(root, e.Name()))
			}
		}
	}
	var dirs []string
	for _, h := range hierarchies {
		for _, b := range append([]string{"/"}, bases...) {
			d := filepath.Join(h, b, parent)
			if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// removeCgroupDirs removes dirs with their sub-cgroups, children first,
// retrying for up to 10 s while the machine's last processes exit
// (EBUSY).
func removeCgroupDirs(ctx context.Context, dirs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		var errs []error
		for _, d := range dirs {
			if err := rmdirTree(d); err != nil {
				errs = append(errs, err)
			}
		}
		err := errors.Join(errs...)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}
