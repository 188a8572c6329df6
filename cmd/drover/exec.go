package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/local"
)

func newExecCmd() *cobra.Command {
	var pf pipelineFlags
	var file, logLevel string
	var manual, committed, useDocker, useShell, noNeeds, quiet, verbose, noColor bool
	var play []string
	var concurrent int
	cmd := &cobra.Command{
		Use:   "exec [JOB...]",
		Short: "Run this work tree's .gitlab-ci.yml here, as GitLab would run it for this branch",
		Long: `Runs the pipeline of the git work tree you are in: its .gitlab-ci.yml (or
--file) compiled as GitLab compiles it for the checked-out branch (rules,
needs, parallel:matrix, ...), run by an embedded coordinator and runner
manager. Jobs that name an image run on drover's docker executor when a
Docker engine answers (it honours image: and services:), else on the shell
executor; --docker and --shell choose one for every job.

The jobs see the work tree as it is: uncommitted changes and untracked
files git does not ignore are included (the work tree is recorded as a
commit on refs/drover/exec, without touching your index or branch);
--committed runs HEAD as committed instead.

With JOB names, only those jobs run, with what they need (--no-needs: only
those; their needs on jobs not run are ignored); a manual job named is
played. --play JOB plays that manual job when its turn comes, --manual every
one; otherwise a manual job waits and the run ends when nothing else can run.

rules:changes compares the work tree with HEAD's parent: the last commit
and what is not committed yet are the push.

Artifacts, caches and logs stay in .drover/ at the root of the work tree
(ignored by git) between runs. Each job's log is printed with the job's name
in front of every line, then a table of the jobs. The exit code is 0 when the
pipeline succeeded, 1 when it did not, 2 for a configuration error (every
error is printed with file:line).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := verboseLogger(cmd.ErrOrStderr(), verbose, logLevel)
			if err != nil {
				return err
			}
			vars, err := pf.vars()
			if err != nil {
				return usageError(err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			self, _ := os.Executable()
			out, done := logOutput(cmd, noColor, false)
			defer done()
			if noNeeds && len(args) == 0 {
				return usageError(errors.New("--no-needs: name the jobs to run"))
			}
			res, err := local.Exec(ctx, local.ExecOptions{
				File: file, Jobs: args, WithoutNeeds: noNeeds, Ref: pf.ref, Variables: vars, Manual: manual, Play: play,
				Committed: committed, Docker: useDocker, Shell: useShell, Concurrent: concurrent, Out: out, Logger: logger, Quiet: quiet,
				Providers: providers(nil, nil, nil, nil), Version: version,
				HelperCommand: helperCommand(), HelperBinary: self,
			})
			var ce *local.ConfigError
			if errors.As(err, &ce) {
				for _, e := range ce.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				return usageError(errors.New(ce.Msg))
			}
			if err != nil {
				return err
			}
			if !res.OK {
				return &exitError{code: 1, err: errors.New("the pipeline did not succeed")}
			}
			return nil
		},
	}
	pf.addRef(cmd)
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "the CI configuration, relative to the work tree's root (default .gitlab-ci.yml)")
	f.BoolVar(&manual, "manual", false, "play every manual job when its turn comes")
	f.StringArrayVar(&play, "play", nil, "play this manual job when its turn comes (repeatable; a base name plays all its parallel jobs)")
	f.BoolVar(&noNeeds, "no-needs", false, "run only the named jobs, not what they need")
	f.BoolVar(&committed, "committed", false, "run HEAD as committed, not the work tree with its changes")
	f.BoolVar(&useDocker, "docker", false, "run every job on the docker executor (image:, services:)")
	f.BoolVar(&useShell, "shell", false, "run every job on the shell executor, even those that name an image")
	f.IntVar(&concurrent, "concurrent", 4, "jobs run at once")
	f.BoolVarP(&quiet, "quiet", "q", false, "print the progress and the table, not the jobs' logs")
	f.BoolVarP(&verbose, "verbose", "v", false, "print drover's own log (at --log-level) besides the jobs'")
	f.StringVar(&logLevel, "log-level", "info", "level of drover's own log with --verbose")
	f.BoolVar(&noColor, "no-color", false, "no colours or section markers (also NO_COLOR, and when stdout is not a terminal)")
	return cmd
}
