package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func newListCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the runners of config.toml",
		Long: `Prints the config file in use and, for each of its [[runners]], the name,
executor, the start of the token (never all of it) and the URL, in the
words of gitlab-runner list. A config file without runners, or none yet,
lists nothing and is no error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDefaultConfig(cmd, cfgPath); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%-50s ConfigFile=%s\n", "Listing configured runners", cfgPath)
			if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s does not exist yet: drover register creates it\n", cfgPath)
				return nil
			}
			cfg, err := loadConfigFile(cmd, cfgPath)
			if err != nil {
				return err
			}
			for _, r := range cfg.Runners {
				fmt.Fprintf(out, "%-50s Executor=%s Token=%s URL=%s\n", r.Name, r.Executor, tokenStart(r.Token), r.URL)
			}
			return nil
		},
	}
	configFlag(cmd.Flags(), &cfgPath, "config file")
	return cmd
}

// tokenStart shows the start of a token, never all of it: its kind
// (glrt-, ...) and up to 9 more characters, at most half of the rest.
func tokenStart(token string) string {
	prefix := ""
	for _, p := range []string{"glrt-", "glrtr-", "glcbt-", "t1_", "t2_", "t3_"} {
		if strings.HasPrefix(token, p) {
			prefix = p
			break
		}
	}
	rest := token[len(prefix):]
	return prefix + rest[:min(9, len(rest)/2)] + "…"
}
