package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/examples"
	"github.com/drover-ci/drover/internal/local"
)

func newLocalCmd() *cobra.Command {
	var data, logLevel string
	var concurrent int
	var quiet, verbose bool
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run the example jobs through an embedded coordinator and runner manager",
		Long: `Starts a coordinator and a runner manager (shell executor) in this process,
submits the example jobs of examples/ through the coordinator's API, streams
their logs with a progress line and prints a summary. One example fails on
purpose and one times out on purpose; the command exits 0 when every job
ended the way its example file expects.

Two pairs of examples show the cache and artifacts: the second job of each
needs the first, so it is submitted once the first succeeded; it restores
the cache the first saved, or downloads the artifact the first uploaded.
Their cache and artifact stages run this binary's ` + "`drover helper`" + `.

The container examples (an image, a service reached by its alias) run on a
second runner with the docker executor when a Docker engine answers
(DOCKER_HOST, else the local socket); their images are built from this
machine's busybox, no registry is used. Without an engine they are listed as
skipped, with the reason, and do not make the command fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := verboseLogger(cmd.ErrOrStderr(), verbose, logLevel)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ok, err := local.Run(ctx, local.Options{
				DataDir: data, Examples: examples.FS, Concurrent: concurrent,
				Out: cmd.OutOrStdout(), Logger: logger, Quiet: quiet,
				Providers: providers(nil, nil, nil, nil), Version: version,
				// As in drover run: the shell executor's cache and artifact
				// stages run this very binary's helper.
				HelperCommand: helperCommand(),
			})
			if err != nil {
				return err
			}
			if !ok {
				return &exitError{code: 1, err: fmt.Errorf("%w", local.ErrUnexpected)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "", "keep the coordinator's data and builds here (default: a temporary directory)")
	f.IntVar(&concurrent, "concurrent", 4, "jobs run at once")
	f.BoolVarP(&quiet, "quiet", "q", false, "do not stream job logs, only progress and the summary")
	f.BoolVarP(&verbose, "verbose", "v", false, "also print drover's own log (at --log-level)")
	f.StringVar(&logLevel, "log-level", "info", "level of drover's own log with --verbose")
	return cmd
}
