package difftest

import (
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
)

var glrHelperBinary = flag.String("helper", "", "GitLab Runner's gitlab-runner-helper binary, for its docker executor's helper image (default: gitlab-runner-helper beside -record or -peer)")

// entrypointImage is drover-test-bash with an entrypoint that says it ran
// and exports DIFFTEST_ENTRYPOINT=ran before it runs its arguments.
const entrypointImage = "drover-difftest-entrypoint:1"

// gitImage, the fixtures' default image, is drover-test-bash with the
// host's git (the git fixtures' scripts run git).
const gitImage = "drover-difftest-git:1"

const entrypointScript = "#!/bin/sh\necho \"difftest entrypoint ran\"\nexport DIFFTEST_ENTRYPOINT=ran\nexec \"$@\"\n"

// TestDifferentialDocker is TestDifferentialShell for the docker
// executor (testdata/golden/docker.json): the fixtures that say
// "docker", on the local test images.
func TestDifferentialDocker(t *testing.T) {
	if *record == "" && *keep == "" {
		if _, err := os.Stat(goldenPath("docker")); err != nil {
			t.Skipf("no recording of GitLab Runner to compare with (scripts/difftest-record.sh makes it): %v", err)
		}
	}
	opts, helper := dockerSetup(t, *record)
	testDifferential(t, opts, helper)
}

// BenchmarkDifferentialDocker is BenchmarkDifferentialShell for the
// docker executor.
func BenchmarkDifferentialDocker(b *testing.B) {
	if *peer == "" {
		b.Skip("-peer names the GitLab Runner binary to compare with")
	}
	opts, helper := dockerSetup(b, *peer)
	benchmarkDifferential(b, opts, helper)
}

// dockerSetup makes sure the engine has the images the docker fixtures
// run (drover's test images, gitImage, entrypointImage and, when glr names GitLab
// Runner's binary, its helper image, whose tag it returns) and returns
// the options of a docker run: the coordinator on Docker's bridge, where
// containers reach it. It skips the test without Docker.
func dockerSetup(t testing.TB, glr string) (Options, string) {
	t.Helper()
	cli := dockertest.Engine(t)
	ctx := t.Context()
	if err := dockerimage.EnsureTestImages(ctx, cli); err != nil {
		t.Fatal(err)
	}
	if _, err := dockerimage.Ensure(ctx, cli, entrypointImage, dockerimage.TestImageLabels(), func(c *dockerimage.Context) error {
		c.File("Dockerfile", 0o644, []byte("FROM "+dockerimage.TestImageBash+"\n"+
			"COPY difftest-entrypoint /usr/local/bin/difftest-entrypoint\n"+
			`ENTRYPOINT ["/usr/local/bin/difftest-entrypoint"]`+"\n"))
		return c.File("difftest-entrypoint", 0o755, []byte(entrypointScript))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := dockerimage.Ensure(ctx, cli, gitImage, dockerimage.TestImageLabels(), func(c *dockerimage.Context) error {
		c.File("Dockerfile", 0o644, []byte("FROM "+dockerimage.TestImageBash+"\nCOPY rootfs/ /\n"))
		return c.HostBinary("/usr/bin/git", "rootfs/usr/bin/git", "rootfs")
	}); err != nil {
		t.Fatal(err)
	}
	var helper string
	if glr != "" {
		bin := *glrHelperBinary
		if bin == "" {
			bin = filepath.Join(filepath.Dir(glr), "gitlab-runner-helper")
		}
		var err error
		if helper, err = dockerimage.EnsureGitLabRunnerHelper(ctx, cli, bin); err != nil {
			t.Fatal(err)
		}
	}
	bridge, err := cli.NetworkInspect(ctx, "bridge", network.InspectOptions{})
	if err != nil {
		t.Fatalf("Docker's bridge network: %v", err)
	}
	var gateway string
	for _, c := range bridge.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			gateway = c.Gateway
		}
	}
	if gateway == "" {
		// An engine that does not say: the address of the bridge's
		// interface on this host.
		gateway = interfaceIPv4(cmpOr(bridge.Options["com.docker.network.bridge.name"], "docker0"))
	}
	if gateway == "" {
		t.Skipf("Docker's bridge network has no IPv4 gateway: %+v", bridge.IPAM.Config)
	}
	listen := net.JoinHostPort(gateway, "0")
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Skipf("the coordinator cannot listen on Docker's bridge, where the containers would reach it (an engine on another host?): %v", err)
	}
	ln.Close()
	return Options{Executor: "docker", Listen: listen, Docker: DockerConfig{Image: gitImage}, AfterRunner: removeRunnerLeftovers(t, cli)}, helper
}

// removeRunnerLeftovers removes the containers, networks and volumes a runner keeps
// on the engine for its next jobs (drover's slot networks and builds
// volumes, labelled with its short token): the run's runner is never
// used again, and networks left behind run Docker out of address pools
// after a few dozen runs.
func removeRunnerLeftovers(t testing.TB, cli *dockerclient.Client) func(context.Context, string) {
	return func(ctx context.Context, short string) {
		// Twice: the killed runner may have left a request to make a
		// container (its slot's next standby) that the engine carries
		// out after the first listing.
		for range 2 {
			removeRunnerLeftoversOnce(ctx, t, cli, short)
		}
	}
}

func removeRunnerLeftoversOnce(ctx context.Context, t testing.TB, cli *dockerclient.Client, short string) {
	f := filters.NewArgs(filters.Arg("label", dockerexec.LabelRunner+"="+short))
	// The runner was killed: the removal of its last job's
	// containers, which it does after the job's result, may not be
	// over, and a network with a container on it cannot go.
	ctrs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Logf("list runner %s's containers: %v", short, err)
	}
	for _, c := range ctrs {
		// The runner may have been killed while removing it: its
		// volumes can go once that removal is over.
		if err := dockerexec.RemoveContainer(ctx, cli, c.ID, true); err != nil {
			t.Logf("remove container %s: %v", c.ID, err)
		}
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Logf("list runner %s's networks: %v", short, err)
	}
	for _, n := range nets {
		if err := cli.NetworkRemove(ctx, n.ID); err != nil {
			t.Logf("remove network %s: %v", n.Name, err)
		}
	}
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Logf("list runner %s's volumes: %v", short, err)
		return
	}
	for _, v := range vols.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil {
			t.Logf("remove volume %s: %v", v.Name, err)
		}
	}
}

// interfaceIPv4 is the first IPv4 address of the host's interface name,
// "" when it has none.
func interfaceIPv4(name string) string {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
