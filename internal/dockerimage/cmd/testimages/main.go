// Command testimages builds the images drover's tests run (see
// dockerimage.TestImages: a busybox, a bash and an HTTP service image) into
// the local Docker engine from this machine's own busybox and bash, with no
// registry. It builds only the images the engine does not have, and honours
// DOCKER_HOST.
//
//	go run ./internal/dockerimage/cmd/testimages
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/dockerimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := ensureAll(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testimages:", err)
		os.Exit(1)
	}
}

// ensureAll builds the test images the engine lacks, telling w about each.
func ensureAll(ctx context.Context, w io.Writer) error {
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	for _, ti := range dockerimage.TestImages() {
		start := time.Now()
		built, err := dockerimage.Ensure(ctx, cli, ti.Tag, dockerimage.TestImageLabels(), ti.Write)
		switch {
		case err != nil:
			return err
		case !built:
			fmt.Fprintf(w, "%s: present already\n", ti.Tag)
		default:
			took := time.Since(start).Round(10 * time.Millisecond)
			if img, err := cli.ImageInspect(ctx, ti.Tag); err == nil {
				fmt.Fprintf(w, "%s: built in %s, %.1f MB\n", ti.Tag, took, float64(img.Size)/1e6)
			} else {
				fmt.Fprintf(w, "%s: built in %s\n", ti.Tag, took)
			}
		}
	}
	return nil
}
