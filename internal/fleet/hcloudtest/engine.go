package hcloudtest

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/fleet/docker"
)

// Engine machines (DockerOptions.Engine) are run the way the docker fleet
// provider runs its engine instances, with its exported mechanism
// (docker.RunEngine, docker.RemoveEngineCgroups), so that they behave
// like its instances.

// labelCgroupParent is on an engine machine's container and holds the
// cgroup parent of its inner engine, so that removing the machine also
// removes what the inner engine made in this host's cgroup tree.
const labelCgroupParent = "io.drover.hcloudtest.cgroup-parent"

// cgroupTop is the first element of every engine machine's cgroup
// parent; the docker provider's is "drover-fleet", so neither removes the
// other's.
const cgroupTop = "hcloudtest"

// engineRun adds to a new container's configuration what a machine named
// cname needs to run its own dockerd (docker.RunEngine).
func engineRun(cname string, args []string, cfg *container.Config, host *container.HostConfig) {
	parent := cgroupTop + "/" + cname
	cfg.Labels[labelCgroupParent] = parent
	docker.RunEngine(parent, args, map[string]string{LabelMachine: cfg.Labels[LabelMachine]}, cfg, host)
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
		// Read before the removal: the machine's own cgroups.
		bases = docker.EngineCgroups(c.State.Pid)
	}
	if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if parent == "" || !localEngine(cli) {
		return nil
	}
	if _, err := docker.RemoveEngineCgroups(ctx, cgroupTop, parent, bases); err != nil {
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
