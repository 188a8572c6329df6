package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
)

// apiFlags are the flags every job command shares.
type apiFlags struct {
	url, token, data string
}

func (a *apiFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.url, "url", envOr("DROVER_URL", "http://127.0.0.1:8080"), "coordinator URL (env DROVER_URL)")
	cmd.Flags().StringVar(&a.token, "token", "", "admin token (default: env DROVER_ADMIN_TOKEN, else DATA/admin-token)")
	cmd.Flags().StringVar(&a.data, "data", "./.drover", "coordinator data directory to read the admin token from")
}

// job parses a JOB_ID argument and returns it with the admin API client.
func (a *apiFlags) job(arg string) (int64, *client.Client, error) {
	id, err := parseID(arg)
	if err != nil {
		return 0, nil, err
	}
	c, err := a.client()
	return id, c, err
}

func (a *apiFlags) client() (*client.Client, error) {
	tok := a.token
	if tok == "" {
		tok = os.Getenv("DROVER_ADMIN_TOKEN")
	}
	if tok == "" {
		b, err := os.ReadFile(filepath.Join(a.data, "admin-token"))
		if err != nil {
			return nil, usageError(fmt.Errorf("no admin token: pass --token, set DROVER_ADMIN_TOKEN or point --data at the coordinator's data directory (%v)", err))
		}
		tok = strings.TrimSpace(string(b))
	}
	return client.New(a.url, tok, nil), nil
}

// apiCmd makes cmd a command of the coordinator's admin API: it gets the
// apiFlags, and its RunE makes the client they name and hands it to run.
func apiCmd(cmd *cobra.Command, run func(cmd *cobra.Command, args []string, c *client.Client) error) *cobra.Command {
	var af apiFlags
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := af.client()
		if err != nil {
			return err
		}
		return run(cmd, args, c)
	}
	af.add(cmd)
	return cmd
}

// jobIDCmd is apiCmd for a command on one job (or pipeline), its argument
// the id: a bad id is a usage error, said before the client is made.
func jobIDCmd(cmd *cobra.Command, run func(cmd *cobra.Command, id int64, c *client.Client) error) *cobra.Command {
	var af apiFlags
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, c, err := af.job(args[0])
		if err != nil {
			return err
		}
		return run(cmd, id, c)
	}
	af.add(cmd)
	return cmd
}

func parseKV(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q: want KEY=VALUE", s)
	}
	return k, v, nil
}

// parseService reads a --service value: a JSON object if it starts with
// '{', else the image name.
func parseService(s string) (client.Service, error) {
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		if s == "" {
			return client.Service{}, errors.New("--service: empty image name")
		}
		return client.Service{Name: s}, nil
	}
	var svc client.Service
	if err := json.Unmarshal([]byte(s), &svc); err != nil {
		return client.Service{}, fmt.Errorf("--service %s: %w", s, err)
	}
	if svc.Name == "" {
		return client.Service{}, fmt.Errorf("--service %s: name is required", s)
	}
	return svc, nil
}

func newSubmitCmd() *cobra.Command {
	var (
		af                     apiFlags
		spec                   client.JobSpec
		vars, masked, files    []string
		gitURL, gitRef, gitSha string
		gitDepth               int
		wait, noColor          bool
		image                  client.Image
		imageUser              string
		services               []string
		artifacts              client.Artifacts
		dependencies           []string
	)
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Submit a job to a drover coordinator",
		Example: `  drover submit --name hello --script 'echo hello' --wait
  drover submit --name build --script 'make' --var GOFLAGS=-mod=mod --tag linux \
      --git-url https://example.com/repo.git --git-ref main --git-depth 1
  drover submit --name test --script 'go test ./...' --image golang:1.26 --image-user 1000 \
      --service redis:7 --service '{"name":"postgres:17","alias":"db pg","variables":[{"key":"POSTGRES_PASSWORD","value":"pw"}]}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec.Name == "" || len(spec.Script) == 0 {
				return usageError(errors.New("--name and at least one --script are required"))
			}
			for _, set := range []struct {
				list         []string
				masked, file bool
			}{{vars, false, false}, {masked, true, false}, {files, false, true}} {
				for _, s := range set.list {
					k, v, err := parseKV(s)
					if err != nil {
						return usageError(err)
					}
					spec.Variables = append(spec.Variables, client.Variable{Key: k, Value: v, Masked: set.masked, File: set.file})
				}
			}
			if gitURL != "" {
				if gitSha == "" {
					// As GitLab's pipelines do: the job carries the commit
					// the ref points at now (CI_COMMIT_SHA is real). When
					// it cannot be resolved here, the runner checks out the
					// ref's tip.
					sha, err := resolveRef(cmd.Context(), gitURL, gitRef)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "drover: %v; the runner checks out the tip of the ref\n", err)
					}
					gitSha = sha
				}
				spec.Git = &client.Git{RepoURL: gitURL, Ref: gitRef, Sha: gitSha, Depth: gitDepth}
			}
			if imageUser != "" {
				image.Docker = &client.ImageDocker{User: imageUser}
			}
			if image.Name == "" && (len(image.Entrypoint) > 0 || len(image.PullPolicy) > 0 || image.Docker != nil) {
				return usageError(errors.New("--image-entrypoint, --image-pull-policy and --image-user need --image"))
			}
			if image.Name != "" {
				spec.Image = &image
			}
			for _, s := range services {
				svc, err := parseService(s)
				if err != nil {
					return usageError(err)
				}
				spec.Services = append(spec.Services, svc)
			}
			if len(artifacts.Paths) > 0 {
				spec.Artifacts = &artifacts
			} else if artifacts.ExpireIn != "" {
				return usageError(errors.New("--artifacts-expire-in needs --artifact-path"))
			}
			for _, d := range dependencies {
				if id, err := strconv.ParseInt(d, 10, 64); err == nil {
					spec.Dependencies = append(spec.Dependencies, client.Dependency{ID: id})
				} else {
					spec.Dependencies = append(spec.Dependencies, client.Dependency{Name: d})
				}
			}
			c, err := af.client()
			if err != nil {
				return err
			}
			j, err := c.Submit(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if !wait {
				// The id alone on stdout (for scripts), how to follow it on
				// stderr.
				fmt.Fprintln(cmd.OutOrStdout(), j.ID)
				fmt.Fprintf(cmd.ErrOrStderr(), "job %d submitted (%s); follow it: drover logs %d -f\n", j.ID, j.Status, j.ID)
				if j.StuckReason != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "job %d is stuck: %s\n", j.ID, j.StuckReason)
				}
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "job %d submitted; waiting for it\n", j.ID)
			if j.StuckReason != "" {
				// Said at once: it may wait for ever otherwise.
				fmt.Fprintf(cmd.ErrOrStderr(), "job %d is stuck: %s\n", j.ID, j.StuckReason)
			}
			out, done := logOutput(cmd, noColor, false)
			final, err := c.Follow(cmd.Context(), j.ID, out, 200*time.Millisecond)
			if err := errors.Join(err, done()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "job %d: %s %s\n", final.ID, final.Status, final.FailureReason)
			if final.Status != "success" {
				return &exitError{code: 1, err: fmt.Errorf("job %d ended %s", final.ID, final.Status)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	af.add(cmd)
	f.StringVar(&spec.Name, "name", "", "job name (required)")
	f.StringVar(&spec.Project, "project", "", "project path (default default/default)")
	f.StringArrayVar(&spec.Script, "script", nil, "a script line (repeat for more lines)")
	f.StringArrayVar(&spec.AfterScript, "after-script", nil, "an after_script line (repeatable)")
	f.StringArrayVar(&vars, "var", nil, "variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&masked, "masked-var", nil, "masked variable KEY=VALUE, hidden in the log (repeatable)")
	f.StringArrayVar(&files, "file-var", nil, "file variable KEY=VALUE: the job sees KEY as a path to a file holding VALUE (repeatable)")
	f.StringArrayVar(&spec.Tags, "tag", nil, "required runner tag (repeatable)")
	f.IntVar(&spec.Timeout, "timeout", 0, "job timeout in seconds (default 3600)")
	f.StringVar(&image.Name, "image", "", "image to run the job in (for executors that use one, e.g. docker)")
	f.StringArrayVar(&image.Entrypoint, "image-entrypoint", nil, "override the image's entrypoint: one argument (repeat for more; '' alone clears it)")
	f.StringArrayVar((*[]string)(&image.PullPolicy), "image-pull-policy", nil, "pull policy of the image: always, if-not-present or never (repeatable: tried in order)")
	f.StringVar(&imageUser, "image-user", "", "user (name or uid, optionally :group) to run the job's container as (docker)")
	f.StringArrayVar(&services, "service", nil, `service container: an image name (redis:7) or a JSON object such as
{"name":"redis:7","alias":"cache db","command":[..],"entrypoint":[..],"variables":[{"key":"K","value":"V"}],"pull_policy":"if-not-present"}
(repeatable)`)
	f.StringArrayVar(&artifacts.Paths, "artifact-path", nil, "keep this path (a glob, ** allowed) as the job's artifacts (repeatable); download them with drover artifacts")
	f.StringVar(&artifacts.ExpireIn, "artifacts-expire-in", "", `how long the artifacts are kept: "1 week", "3 days", "never" (default 30 days)`)
	f.StringArrayVar(&dependencies, "dependency", nil, "download the artifacts of this earlier job of the project before the script: a job id, or a name (the newest job of that name), which must have succeeded (repeatable)")
	f.StringVar(&gitURL, "git-url", "", "repository to check out")
	f.StringVar(&gitRef, "git-ref", "", "branch or tag to check out")
	f.StringVar(&gitSha, "git-sha", "", "commit to check out")
	f.IntVar(&gitDepth, "git-depth", 0, "shallow clone depth (0 = full)")
	f.BoolVar(&wait, "wait", false, "stream the job's log and exit 0 only if it succeeds")
	f.BoolVar(&noColor, "no-color", false, "with --wait: no colours or section markers (also NO_COLOR, and when stdout is not a terminal)")
	return cmd
}

func newJobsCmd() *cobra.Command {
	var af apiFlags
	var status string
	var limit int
	var before, after int64
	var oldest bool
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs of a drover coordinator, newest first",
		Long: `Lists jobs, newest first, --limit at a time (default 100); a last line says
how many more there are and how to see them (--before ID, or --after ID with
--oldest).`,
		Example: `  drover jobs --status running,pending
  drover jobs --limit 20 --before 480
  drover jobs --oldest --limit 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageError(fmt.Errorf("--limit %d: want 1 to 1000", limit))
			}
			if before < 0 || after < 0 {
				return usageError(errors.New("--before and --after take a job id"))
			}
			c, err := af.client()
			if err != nil {
				return err
			}
			jobs, total, err := c.JobList(cmd.Context(), client.JobQuery{
				Status: status, Limit: limit, Newest: !oldest, BeforeID: before, AfterID: after,
			})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPROJECT\tSTATUS\tREASON\tEXIT\tRUNNER\tCREATED")
			for _, j := range jobs {
				exit, runner, created := "", "", ""
				if j.ExitCode != nil {
					exit = strconv.Itoa(*j.ExitCode)
				}
				if j.RunnerID != nil {
					runner = strconv.FormatInt(*j.RunnerID, 10)
					if j.RunnerDescription != "" {
						runner = j.RunnerDescription + " (" + runner + ")"
					}
				}
				if j.CreatedAt != nil {
					created = j.CreatedAt.Local().Format(time.DateTime)
				}
				reason := j.FailureReason
				if j.StuckReason != "" {
					reason = "stuck: " + j.StuckReason
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Name, j.Project, j.Status, reason, exit, runner, created)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(jobs) == 0 {
				if total == 0 || (before == 0 && after == 0) {
					fmt.Fprintln(out, "no jobs")
				} else {
					fmt.Fprintln(out, "no more jobs")
				}
				return nil
			}
			last := jobs[len(jobs)-1].ID
			next := fmt.Sprintf("drover jobs --before %d", last)
			if oldest {
				next = fmt.Sprintf("drover jobs --oldest --after %d", last)
			}
			if status != "" {
				next += " --status " + status
			}
			switch {
			case before == 0 && after == 0 && total >= 0:
				// The first page: the total says how many are left.
				if more := total - int64(len(jobs)); more > 0 {
					fmt.Fprintf(out, "%d more: %s\n", more, next)
				}
			case len(jobs) == limit:
				fmt.Fprintf(out, "more may follow: %s\n", next)
			}
			return nil
		},
	}
	af.add(cmd)
	cmd.Flags().StringVar(&status, "status", "", "only jobs with these statuses (comma-separated: pending,running,success,failed,canceled...)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many jobs (1–1000)")
	cmd.Flags().Int64Var(&before, "before", 0, "only jobs older than this job id (the next page)")
	cmd.Flags().Int64Var(&after, "after", 0, "only jobs newer than this job id (with --oldest: the next page)")
	cmd.Flags().BoolVar(&oldest, "oldest", false, "oldest first")
	return cmd
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError(fmt.Errorf("job id %q: want a positive number", s))
	}
	return id, nil
}

func newLogsCmd() *cobra.Command {
	var follow, noColor, timestamps bool
	cmd := jobIDCmd(&cobra.Command{
		Use:   "logs JOB_ID",
		Short: "Print a job's log (-f follows it until the job ends)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, id int64, c *client.Client) error {
		out, done := logOutput(cmd, noColor, timestamps)
		if follow {
			_, err := c.Follow(cmd.Context(), id, out, 500*time.Millisecond)
			return errors.Join(err, done())
		}
		b, _, err := c.Trace(cmd.Context(), id, 0)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return errors.Join(err, done())
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the job ends")
	cmd.Flags().BoolVar(&noColor, "no-color", false, "no colours or section markers (also NO_COLOR, and when stdout is not a terminal)")
	cmd.Flags().BoolVar(&timestamps, "timestamps", false, "keep the per-line timestamps GitLab Runner 19 writes (dropped by default)")
	return cmd
}

func newCancelCmd() *cobra.Command {
	return jobActionCmd("cancel JOB_ID", "Cancel a job (a running job gets its after_script)",
		func(ctx context.Context, c *client.Client, id int64) (string, error) {
			j, err := c.Cancel(ctx, id)
			if ae := (*client.APIError)(nil); errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.JobStatus != "" {
				// Its runner's final state came first: nothing was canceled.
				return "", fmt.Errorf("job %d already finished: %s", id, ae.JobStatus)
			}
			if err != nil {
				return "", err
			}
			if j.Status == "canceling" {
				return fmt.Sprintf("job %d: canceling (its runner is stopping it)", j.ID), nil
			}
			return fmt.Sprintf("job %d: %s", j.ID, j.Status), nil
		})
}

func newRetryCmd() *cobra.Command {
	return jobActionCmd("retry JOB_ID", "Queue a finished job again, as a new job with the same spec",
		func(ctx context.Context, c *client.Client, id int64) (string, error) {
			j, err := c.Retry(ctx, id)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("job %d: %s (retry of job %d)", j.ID, j.Status, id), nil
		})
}

// jobActionCmd is a command acting on one job through the admin API; act
// returns the line to print.
func jobActionCmd(use, short string, act func(ctx context.Context, c *client.Client, id int64) (string, error)) *cobra.Command {
	return jobIDCmd(&cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, id int64, c *client.Client) error {
		line, err := act(cmd.Context(), c, id)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), line)
		return nil
	})
}

// resolveRef returns the commit ref (a branch or tag; "" = the remote's
// HEAD) points at in the repository at url.
func resolveRef(ctx context.Context, url, ref string) (string, error) {
	sha, err := gitrepo.ResolveRemote(ctx, url, ref)
	if err != nil {
		return "", fmt.Errorf("--git-ref: %w", err)
	}
	return sha, nil
}
