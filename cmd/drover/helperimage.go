package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/dockerimage"
)

func newHelperImageCmd() *cobra.Command {
	var tag, binary string
	var push bool
	cmd := &cobra.Command{
		Use:   "helper-image",
		Short: "Build drover's helper image (for the kubernetes executor's helper_image) and push it",
		Long: `Builds the image of drover's helper from a drover binary with the local
Docker engine (DOCKER_HOST): the binary as /usr/bin/drover, git, and a busybox
shell. The kubernetes executor runs it as each job's helper container: set
[runners.kubernetes] helper_image to the pushed reference. The docker
executors build it themselves and need none of this.

The image is built only when the engine lacks it. With --push it is pushed to
the registry --tag names (credentials from nowhere: a registry that needs a
login is not supported yet). The tag is printed on standard output.`,
		Example: `  drover helper-image --tag registry.example.com:5000/drover-helper:v1 --push`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tag == "" {
				return usageError(fmt.Errorf("--tag is required"))
			}
			if binary == "" {
				var err error
				if binary, err = os.Executable(); err != nil {
					return fmt.Errorf("find drover's own binary: %w", err)
				}
			}
			cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
			if err != nil {
				return fmt.Errorf("docker engine: %w", err)
			}
			defer cli.Close()
			ctx := cmd.Context()
			_, built, err := dockerimage.EnsureHelper(ctx, cli, binary, tag)
			if err != nil {
				return fmt.Errorf("build the helper image %s: %w", tag, err)
			}
			if built {
				fmt.Fprintf(cmd.ErrOrStderr(), "built %s from %s\n", tag, binary)
			}
			if push {
				if err := pushImage(ctx, cli, tag); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "pushed %s\n", tag)
			}
			fmt.Fprintln(cmd.OutOrStdout(), tag)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tag, "tag", "", "the image's reference, registry included (required)")
	f.StringVar(&binary, "binary", "", "the drover binary to put in the image (default: this one; it must be a linux binary)")
	f.BoolVar(&push, "push", false, "push the image to its registry")
	return cmd
}

// pushImage pushes ref (anonymously: a registry without login) and waits
// for the push to end.
func pushImage(ctx context.Context, cli *dockerclient.Client, ref string) error {
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: "e30="})
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	err = pushMessages(rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// pushMessages reads the engine's push progress and returns the error it
// reports, if any.
func pushMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("%s", m.Error)
		}
	}
}
