package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/local"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
)

func newPipelineCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "Run and inspect pipelines (a repository's .gitlab-ci.yml) on a drover coordinator",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPipelineRunCmd(), newPipelineListCmd(), newPipelineShowCmd(),
		pipelineActionCmd("cancel PIPELINE_ID", "Cancel every unfinished job of a pipeline", (*client.Client).CancelPipeline),
		pipelineActionCmd("retry PIPELINE_ID", "Retry a pipeline's failed, canceled and skipped jobs", (*client.Client).RetryPipeline),
		jobActionCmd("play JOB_ID", "Play a manual job", func(ctx context.Context, c *client.Client, id int64) (string, error) {
			j, err := c.Play(ctx, id)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("job %d (%s): %s", j.ID, j.Name, j.Status), nil
		}),
	)
	return cmd
}

func newPipelineRunCmd() *cobra.Command {
	var pf pipelineFlags
	var repo, sha, project, file, source string
	var wait, quiet bool
	cmd := apiCmd(&cobra.Command{
		Use:   "run",
		Short: "Create a pipeline: the coordinator fetches the commit and runs its .gitlab-ci.yml",
		Long: `Asks the coordinator to run a repository's CI configuration for a ref: it
fetches the commit (--sha, default the ref's), compiles its .gitlab-ci.yml
and creates the pipeline's jobs, which its runners then take.

--repo is a URL the coordinator can fetch (default: this work tree's origin
remote, else the work tree itself, for a coordinator on this machine); --ref
defaults to the checked-out branch. With --wait the command follows every
job's log, prefixed with the job's name, and exits 0 only when the pipeline
succeeded. A configuration with errors is refused with every error, exit 2.`,
		Args: cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string, c *client.Client) error {
		ctx := cmd.Context()
		vars, err := pf.vars()
		if err != nil {
			return usageError(err)
		}
		ref := pf.ref
		// Outside a work tree, --project alone names a registered
		// project: the coordinator takes its repository and default
		// branch.
		root, rootErr := "", error(nil)
		if repo == "" || ref == "" || project == "" {
			root, rootErr = gitrepo.TopLevel(ctx, ".")
			if rootErr != nil && project == "" {
				return usageError(fmt.Errorf("not in a git work tree: pass --repo, --ref and --project, or --project of a registered project (%v)", rootErr))
			}
		}
		if (repo == "" || ref == "" || project == "") && rootErr == nil {
			g := gitrepo.Git{Dir: root}
			if repo == "" {
				repo = "file://" + root
				if u, err := gitOrigin(ctx, root); err == nil && u != "" {
					repo = u
				}
			}
			if ref == "" {
				cm, err := g.Resolve(ctx, "", "")
				if err != nil {
					return usageError(err)
				}
				ref = cm.Ref
			}
			if project == "" {
				project = "local/" + filepath.Base(root)
			}
		}
		spec := client.PipelineSpec{Project: project, RepoURL: repo, Ref: ref, SHA: sha, Source: source, ConfigFile: file}
		for k, v := range vars {
			spec.Variables = append(spec.Variables, client.Variable{Key: k, Value: v})
		}
		p, err := c.CreatePipeline(ctx, spec)
		var ae *client.APIError
		if errors.As(err, &ae) && len(ae.Errors) > 0 {
			for _, e := range ae.Errors {
				fmt.Fprintln(cmd.ErrOrStderr(), e)
			}
			return usageError(errors.New(ae.Msg))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "pipeline %d (#%d of %s) for %s %.8s: %d jobs\n", p.ID, p.IID, p.Project, p.Ref, p.SHA, len(p.Jobs))
		if !wait {
			return nil
		}
		out, done := logOutput(cmd, false, false)
		defer done()
		final, err := local.FollowPipeline(ctx, c, p.ID, out, local.FollowOptions{Quiet: quiet, Poll: 500 * time.Millisecond})
		if err != nil {
			return err
		}
		local.PipelineSummary(out, final)
		if final.Status == "manual" {
			fmt.Fprintln(out, "the pipeline waits for its manual jobs: drover pipeline play JOB_ID")
			return nil
		}
		if final.Status != "success" {
			return &exitError{code: 1, err: fmt.Errorf("pipeline %d: %s", final.ID, final.Status)}
		}
		return nil
	})
	pf.addRef(cmd)
	f := cmd.Flags()
	f.StringVar(&repo, "repo", "", "the repository URL the coordinator fetches (default: origin, else this work tree)")
	f.StringVar(&sha, "sha", "", "the commit (default: the ref's)")
	f.StringVar(&project, "project", "", "the project path, group/name (default local/<work tree's name>)")
	f.StringVar(&file, "file", "", "the CI configuration's path in the repository (default .gitlab-ci.yml)")
	f.StringVar(&source, "source", "api", "CI_PIPELINE_SOURCE (push, web, api, schedule, trigger)")
	f.BoolVarP(&wait, "wait", "w", false, "follow the jobs' logs until the pipeline ends; exit 1 unless it succeeded")
	f.BoolVarP(&quiet, "quiet", "q", false, "with --wait: the progress and the table only")
	return cmd
}

// gitOrigin returns the work tree's origin remote URL.
func gitOrigin(ctx context.Context, root string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "remote", "get-url", "origin").Output()
	return strings.TrimSpace(string(out)), err
}

func newPipelineListCmd() *cobra.Command {
	var project string
	var limit int
	cmd := apiCmd(&cobra.Command{
		Use:   "list",
		Short: "List the newest pipelines",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string, c *client.Client) error {
		ps, err := c.Pipelines(cmd.Context(), project, limit)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPROJECT\tIID\tREF\tSHA\tSOURCE\tSTATUS\tCREATED")
		for _, p := range ps {
			created := ""
			if p.CreatedAt != nil {
				created = p.CreatedAt.Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.8s\t%s\t%s\t%s\n", p.ID, p.Project, p.IID, p.Ref, p.SHA, p.Source, p.Status, created)
		}
		return tw.Flush()
	})
	cmd.Flags().StringVar(&project, "project", "", "only this project's pipelines")
	cmd.Flags().IntVar(&limit, "limit", 20, "how many")
	return cmd
}

func newPipelineShowCmd() *cobra.Command {
	return jobIDCmd(&cobra.Command{
		Use:   "show PIPELINE_ID",
		Short: "Show a pipeline and its jobs",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, id int64, c *client.Client) error {
		p, err := c.Pipeline(cmd.Context(), id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "pipeline %d (#%d of %s), %s %s %.8s, source %s\n", p.ID, p.IID, p.Project, refKind(p), p.Ref, p.SHA, p.Source)
		for _, w := range p.Warnings {
			fmt.Fprintln(out, "warning:", w)
		}
		local.PipelineSummary(out, p)
		return nil
	})
}

func refKind(p *client.Pipeline) string {
	if p.Tag {
		return "tag"
	}
	return "branch"
}

func pipelineActionCmd(use, short string, act func(*client.Client, context.Context, int64) (*client.Pipeline, error)) *cobra.Command {
	return jobIDCmd(&cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, id int64, c *client.Client) error {
		p, err := act(c, cmd.Context(), id)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "pipeline %d: %s\n", p.ID, p.Status)
		return nil
	})
}
