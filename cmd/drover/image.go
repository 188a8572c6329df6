package main

import (
	"fmt"
	"os"
	"strings"

	dockerclient "github.com/docker/docker/client"
	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/dockerimage"
)

func newImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build drover's container images",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newImageBuildCmd())
	return cmd
}

func newImageBuildCmd() *cobra.Command {
	var binary, tag, helperTag, registry string
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build drover's image and its helper image from a drover binary, and push them",
		Long: `Builds drover's two images with the local Docker engine (DOCKER_HOST), from
this host's files, no registry needed:

  drover:VERSION         drover itself (coordinator, runner manager, router: the
                         command is the container's arguments), busybox as
                         /bin/sh, the CA bundle; runs as uid 1000 in
                         /var/lib/drover, config in /etc/drover
  drover-helper:SHA12    the kubernetes executor's helper image (see
                         drover helper-image): drover, git and busybox

Each is built only when the engine lacks it; drover's image also when the
tag holds another binary's image. Build the binary with CGO_ENABLED=0 (as
scripts/images.sh does) and the image holds no shared library.

With --registry HOST[:PORT] both are tagged under that registry as well and
pushed (no login: a registry that needs one is not supported yet). The
references are printed on standard output, one a line, drover's first;
the sizes on standard error.`,
		Example: `  scripts/images.sh --registry 127.0.0.1:5100
  drover image build --binary ./drover --registry registry.example.com:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if binary == "" {
				var err error
				if binary, err = os.Executable(); err != nil {
					return fmt.Errorf("find drover's own binary: %w", err)
				}
			}
			if tag == "" {
				tag = dockerimage.DroverTag(version)
			}
			cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
			if err != nil {
				return fmt.Errorf("docker engine: %w", err)
			}
			defer cli.Close()
			ctx := cmd.Context()
			stderr := cmd.ErrOrStderr()
			if _, err := dockerimage.EnsureDrover(ctx, cli, binary, tag, version); err != nil {
				return fmt.Errorf("build drover's image %s: %w", tag, err)
			}
			helperTag, _, err = dockerimage.EnsureHelper(ctx, cli, binary, helperTag)
			if err != nil {
				return fmt.Errorf("build the helper image: %w", err)
			}
			for _, t := range []string{tag, helperTag} {
				img, err := cli.ImageInspect(ctx, t)
				if err != nil {
					return fmt.Errorf("inspect %s: %w", t, err)
				}
				fmt.Fprintf(stderr, "%s: %.1f MB\n", t, float64(img.Size)/1e6)
				ref := t
				if registry != "" {
					ref = strings.TrimSuffix(registry, "/") + "/" + t
					if err := cli.ImageTag(ctx, t, ref); err != nil {
						return fmt.Errorf("tag %s as %s: %w", t, ref, err)
					}
					if err := pushImage(ctx, cli, ref); err != nil {
						return err
					}
					fmt.Fprintf(stderr, "pushed %s\n", ref)
				}
				fmt.Fprintln(cmd.OutOrStdout(), ref)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&binary, "binary", "", "the drover binary to put in the images (default: this one; it must be a linux binary)")
	f.StringVar(&tag, "tag", "", "tag of drover's image (default drover:VERSION, this binary's version)")
	f.StringVar(&helperTag, "helper-tag", "", "tag of the helper image (default drover-helper: and the binary's sha256, 12 digits)")
	f.StringVar(&registry, "registry", "", "also tag the images under this registry (HOST[:PORT]) and push them there")
	return cmd
}
