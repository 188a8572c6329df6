package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/forge/posthook"
)

func newHookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Make a plain git server start pipelines on push (a post-receive hook)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newHookPostReceiveCmd(), newHookAnnounceCmd())
	return cmd
}

// hookSecret reads the webhook secret from --secret, --secret-file or
// $DROVER_WEBHOOK_SECRET.
func hookSecret(secret, file string) (string, error) {
	if secret != "" && file != "" {
		return "", usageError(errors.New("--secret and --secret-file: give one"))
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read the webhook secret: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	if secret == "" {
		secret = os.Getenv("DROVER_WEBHOOK_SECRET")
	}
	if secret == "" {
		return "", usageError(errors.New("no webhook secret: pass --secret-file (or --secret, or set DROVER_WEBHOOK_SECRET) with the project's secret (drover project show --secret PROJECT)"))
	}
	return secret, nil
}

func newHookPostReceiveCmd() *cobra.Command {
	var h posthook.Hook
	var install, secret, secretFile string
	var force bool
	cmd := &cobra.Command{
		Use:   "post-receive --url URL --project PATH [--install BARE_REPO]",
		Short: "Print, or install into a bare repository, a post-receive hook that starts pipelines",
		Long: `Prints a git post-receive hook that announces every pushed branch and tag to
the coordinator at --url as a push of project --project (drover's generic
webhook, authenticated with the project's webhook secret): the coordinator
fetches the commit and runs its .gitlab-ci.yml. The pusher sees the
pipeline's URL, or why none started, in git push's "remote:" lines; a
coordinator that cannot be reached never fails the push.

With --install the hook is written to BARE_REPO/hooks/post-receive and the
secret (from --secret-file, --secret or $DROVER_WEBHOOK_SECRET) to
BARE_REPO/hooks/` + posthook.SecretFile + ` (mode 0600). A post-receive hook that
drover did not write is left alone unless --force.

The hook runs this drover binary (--drover to name another); the
coordinator fetches the commits from the project's repository URL, or
from --repo-url (default with --install: the bare repository's path, for a
coordinator on the same machine).`,
		Example: `  drover hook post-receive --url http://127.0.0.1:8080 --project team/app \
    --secret-file secret.txt --install /srv/git/app.git`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if h.URL == "" || h.Project == "" {
				return usageError(errors.New("--url and --project are required"))
			}
			if h.Drover == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find this drover binary (pass --drover): %w", err)
				}
				h.Drover = exe
			}
			if !filepath.IsAbs(h.Drover) {
				return usageError(fmt.Errorf("--drover %q: an absolute path, the hook runs in the repository's directory", h.Drover))
			}
			if install == "" {
				fmt.Fprint(cmd.OutOrStdout(), posthook.Script(h))
				return nil
			}
			dir, err := filepath.Abs(install)
			if err != nil {
				return err
			}
			if h.RepoURL == "" {
				h.RepoURL = dir
			}
			s, err := hookSecret(secret, secretFile)
			if err != nil {
				return err
			}
			path, err := posthook.Install(dir, h, s, force)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s: pushes to %s start pipelines of %s on %s\n", path, dir, h.Project, h.URL)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&h.URL, "url", "", "the coordinator's URL")
	f.StringVar(&h.Project, "project", "", "the project's path (group/name)")
	f.StringVar(&h.RepoURL, "repo-url", "", "where the coordinator fetches the commits (default: the project's repository URL; with --install the repository's path)")
	f.StringVar(&h.Drover, "drover", "", "the drover binary the hook runs (default: this one)")
	f.StringVar(&install, "install", "", "write the hook into this bare repository (or .git directory) instead of printing it")
	f.StringVar(&secret, "secret", "", "the project's webhook secret (visible in ps: prefer --secret-file)")
	f.StringVar(&secretFile, "secret-file", "", "a file holding the project's webhook secret")
	f.BoolVar(&force, "force", false, "replace a post-receive hook that drover did not write")
	return cmd
}

func newHookAnnounceCmd() *cobra.Command {
	var a posthook.Announcer
	var secret, secretFile string
	cmd := &cobra.Command{
		Use:   "announce --url URL --project PATH --secret-file FILE < updates",
		Short: "Announce pushed refs to the coordinator (what the post-receive hook runs)",
		Long: `Reads git's post-receive lines ("old-sha new-sha refs/...") from standard
input and announces each pushed branch and tag (not deletions) to the
coordinator, with its head commit's author and message, read with git in
the current repository (GIT_DIR). Prints one line per ref. Exits 1 if a ref
could not be announced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.URL == "" || a.Project == "" {
				return usageError(errors.New("--url and --project are required"))
			}
			s, err := hookSecret(secret, secretFile)
			if err != nil {
				return err
			}
			a.Secret, a.Out = s, cmd.OutOrStdout()
			updates, err := posthook.ParseUpdates(cmd.InOrStdin())
			if err != nil {
				return usageError(fmt.Errorf("standard input: %w", err))
			}
			_, err = a.Announce(cmd.Context(), updates)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.URL, "url", "", "the coordinator's URL")
	f.StringVar(&a.Project, "project", "", "the project's path (group/name)")
	f.StringVar(&a.RepoURL, "repo-url", "", "where the coordinator fetches the commits (default: the project's repository URL)")
	f.StringVar(&a.GitDir, "git-dir", "", "the repository (default: git's, the hook's GIT_DIR)")
	f.StringVar(&secret, "secret", "", "the project's webhook secret")
	f.StringVar(&secretFile, "secret-file", "", "a file holding the project's webhook secret")
	return cmd
}
