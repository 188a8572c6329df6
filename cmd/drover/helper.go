package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/helper"
)

func newHelperCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "helper",
		Short:  "Run inside the docker executor's helper container (not for people)",
		Hidden: true,
		// The helper parses its own flags: drover's would only get in the way.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			helper.LimitMemory()
			if code := helper.Main(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
}
