package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
)

// The docker runner's tags. Container examples get dockerTag, which the
// shell runner lacks, so that only the docker runner takes them; the shell
// runner keeps the untagged examples.
const dockerTag = "docker"

var dockerRunnerTags = []string{"local", dockerTag}

// pingTimeout bounds the check that a Docker engine answers.
const pingTimeout = 5 * time.Second

// imagesTimeout bounds the build of the test images.
const imagesTimeout = 5 * time.Minute

// dockerDefaults is the docker runner's [runners.docker]: the test images
// are on the engine only (built from this machine's busybox), so they are
// never pulled; with disable_cache every volume of a job goes with it.
func dockerDefaults() map[string]any {
	return map[string]any{
		"image":         dockerimage.TestImageBusybox,
		"pull_policy":   string(docker.PullIfNotPresent),
		"disable_cache": true,
	}
}

// pingEngine checks that the engine of engines' default endpoint
// (DOCKER_HOST, else the local socket) answers, within pingTimeout.
func pingEngine(ctx context.Context, engines docker.Dialer) error {
	eng, err := engines.Engine(&docker.Config{})
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := eng.Ping(ctx); err != nil {
		return fmt.Errorf("no Docker engine answers at %s: %w", engineHost(eng), err)
	}
	return nil
}

// engineHost names the endpoint of eng in messages.
func engineHost(eng docker.Engine) string {
	if h, ok := eng.(interface{ DaemonHost() string }); ok {
		return h.DaemonHost()
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return "the default Docker socket"
}

// dockerReady reports why the container examples cannot run, "" when they
// can: the engine check (Options.DockerCheck, else pingEngine) must pass
// and the engine must have the test images they use, built here when
// missing.
func dockerReady(ctx context.Context, opts Options, engines docker.Dialer, examples []Example, out io.Writer) string {
	check := opts.DockerCheck
	if check == nil {
		check = func(ctx context.Context) error { return pingEngine(ctx, engines) }
	}
	if err := check(ctx); err != nil {
		return err.Error()
	}
	eng, err := engines.Engine(&docker.Config{})
	if err != nil {
		return "no Docker engine: " + err.Error()
	}
	fmt.Fprintf(out, "drover local: Docker engine at %s answers: the container examples run on it\n", engineHost(eng))
	if err := ensureTestImages(ctx, eng, testImagesOf(examples), out); err != nil {
		return err.Error()
	}
	return ""
}

// testImagesOf lists the test images the container examples need: the
// docker runner's default image and those they name.
func testImagesOf(examples []Example) []dockerimage.TestImage {
	want := map[string]bool{dockerimage.TestImageBusybox: true}
	for _, ex := range examples {
		if !ex.Container() {
			continue
		}
		want[ex.Image] = true
		for _, s := range ex.Services {
			want[s.Name] = true
		}
	}
	var out []dockerimage.TestImage
	for _, ti := range dockerimage.TestImages() {
		if want[ti.Tag] {
			out = append(out, ti)
		}
	}
	return out
}

// ensureTestImages builds those of images the engine does not have, from
// this machine's busybox, with a line saying so (no registry is involved).
func ensureTestImages(ctx context.Context, eng dockerimage.ImageAPI, images []dockerimage.TestImage, out io.Writer) error {
	var missing []dockerimage.TestImage
	for _, ti := range images {
		if _, err := eng.ImageInspect(ctx, ti.Tag); err == nil {
			continue
		} else if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspect the test image %s: %w", ti.Tag, err)
		}
		missing = append(missing, ti)
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := os.Stat(dockerimage.HostBusybox); err != nil {
		return fmt.Errorf("the test images are built from this machine's busybox (apt-get install busybox-static): %w", err)
	}
	tags := make([]string, len(missing))
	for i, ti := range missing {
		tags[i] = ti.Tag
	}
	fmt.Fprintf(out, "drover local: building the test images %s from this machine's busybox (%s; no registry is used) ...\n",
		strings.Join(tags, ", "), dockerimage.HostBusybox)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, imagesTimeout)
	defer cancel()
	for _, ti := range missing {
		if _, err := dockerimage.Ensure(ctx, eng, ti.Tag, dockerimage.TestImageLabels(), ti.Write); err != nil {
			return fmt.Errorf("cannot build the test image %s: %w", ti.Tag, err)
		}
	}
	fmt.Fprintf(out, "drover local: test images built in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// dockerRunner is the docker runner's entry of the manager's config.toml.
func dockerRunner(url, token string) config.RunnerConfig {
	return config.RunnerConfig{
		Name: "local-docker", URL: url, Token: token, Executor: docker.Name,
		RequestConcurrency: 1,
		OutputLimit:        4096,
		Docker:             dockerDefaults(),
	}
}

// withDocker returns providers with the docker executor's (also
// returned), which finds the docker runners of cfg and reaches their
// engine through engines.
func withDocker(providers map[string]executor.Provider, cfg *config.Config, engines docker.Dialer, helperBinary string, logger *slog.Logger) (map[string]executor.Provider, *docker.Provider, error) {
	dockers := &docker.Runners{}
	warns, err := dockers.Apply("(drover local)", cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range warns {
		logger.Warn(w.String())
	}
	// No Configs: the startup sweep would remove what other `drover
	// local` runs on the same engine are using (they share the system ID
	// and their job IDs), and every job removes its own containers.
	prov, err := docker.NewProvider(docker.Options{
		Lookup: dockers.Lookup, Dialer: engines, HelperBinary: helperBinary,
		Logger: logger.With("component", "docker"),
	})
	if err != nil {
		return nil, nil, err
	}
	out := maps.Clone(providers)
	if out == nil {
		out = map[string]executor.Provider{}
	}
	out[docker.Name] = prov
	return out, prov, nil
}

// containerTags are the tags of a container example's jobs: its own and
// dockerTag.
func containerTags(tags []string) []string {
	if slices.Contains(tags, dockerTag) {
		return tags
	}
	return append(slices.Clip(tags), dockerTag)
}

// bridgeGateway is the address of the engine's default bridge network on
// this machine (docker0's, 172.17.0.1 by default): a server listening on
// it is reachable from the jobs' containers, whatever network they are on.
func bridgeGateway(ctx context.Context, engines docker.Dialer) (string, error) {
	eng, err := engines.Engine(&docker.Config{})
	if err != nil {
		return "", err
	}
	nets, err := eng.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", "bridge"))})
	if err != nil {
		return "", fmt.Errorf("list the engine's networks: %w", err)
	}
	for _, n := range nets {
		if n.Name != "bridge" {
			continue
		}
		for _, c := range n.IPAM.Config {
			if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
				return c.Gateway, nil
			}
		}
		// Older engines leave the gateway out: the bridge's interface
		// (docker0) holds it.
		if ifc, err := net.InterfaceByName(n.Options["com.docker.network.bridge.name"]); err == nil {
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
					return ipn.IP.String(), nil
				}
			}
		}
	}
	return "", errors.New("the engine's default bridge network has no IPv4 gateway")
}
