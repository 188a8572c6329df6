package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
)

// pipelineFlags are what lint and exec compile a work tree's
// configuration with.
type pipelineFlags struct {
	ref       string
	source    string
	variables []string
}

func (f *pipelineFlags) add(cmd *cobra.Command) {
	f.addRef(cmd)
	cmd.Flags().StringVar(&f.source, "source", "push", "the pipeline's source, CI_PIPELINE_SOURCE (push, web, api, schedule, trigger, merge_request_event)")
}

// addRef adds --ref and --variable.
func (f *pipelineFlags) addRef(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.ref, "ref", "", "the branch or tag the pipeline runs for (default: the checked-out branch, or the tag at HEAD)")
	fl.StringArrayVar(&f.variables, "variable", nil, "a pipeline variable KEY=VALUE, as given to a manual run (repeatable; wins over the file's variables)")
}

func (f *pipelineFlags) vars() (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range f.variables {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--variable %q: want KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

// workTreeInput finds the repository around file (or the working
// directory) and the compilation input for it: the repository's files,
// the commit's predefined variables, the local changes for
// rules:changes.
func workTreeInput(ctx context.Context, file string, f *pipelineFlags) (ciconfig.Input, gitrepo.Commit, string, error) {
	var in ciconfig.Input
	dir := "."
	if file != "" {
		dir = filepath.Dir(file)
	}
	root, err := gitrepo.TopLevel(ctx, dir)
	if err != nil {
		return in, gitrepo.Commit{}, "", fmt.Errorf("%s is not in a git work tree: %w", dir, err)
	}
	rel := ".gitlab-ci.yml"
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return in, gitrepo.Commit{}, "", err
		}
		realRoot, _ := filepath.EvalSymlinks(root)
		realAbs, _ := filepath.EvalSymlinks(abs)
		if realAbs == "" {
			realAbs = abs
		}
		if rel, err = filepath.Rel(realRoot, realAbs); err != nil || strings.HasPrefix(rel, "..") {
			return in, gitrepo.Commit{}, "", fmt.Errorf("%s is outside the work tree %s", file, root)
		}
		rel = filepath.ToSlash(rel)
	}
	if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
		return in, gitrepo.Commit{}, "", fmt.Errorf("no CI configuration: %w", err)
	}
	g := gitrepo.Git{Dir: root}
	c, err := g.Resolve(ctx, "", f.ref)
	if err != nil {
		return in, gitrepo.Commit{}, "", err
	}
	vars, err := f.vars()
	if err != nil {
		return in, gitrepo.Commit{}, "", usageError(err)
	}
	pre := c.Predefined(f.source)
	pre["CI_PROJECT_DIR"] = root
	pre["CI_PROJECT_NAME"] = filepath.Base(root)
	in = ciconfig.Input{
		FS: os.DirFS(root), File: rel, Predefined: pre, Variables: vars,
		Changes: func(compareTo string) ([]string, bool, error) {
			files, err := g.ChangedInWorkTree(ctx, compareTo)
			return files, err == nil, err
		},
	}
	return in, c, root, nil
}

func newLintCmd() *cobra.Command {
	var pf pipelineFlags
	var quiet bool
	cmd := &cobra.Command{
		Use:   "lint [FILE]",
		Short: "Check a .gitlab-ci.yml and show the pipeline it makes for this branch",
		Long: `Reads FILE (default: .gitlab-ci.yml at the root of the git work tree you
are in), with its local includes, and compiles it as GitLab does for the
checked-out branch (--ref another branch or a tag): extends, anchors,
!reference, rules, only/except, needs, parallel and parallel:matrix. Every
problem is printed as file:line: job:key: what, all of them in one run, and
the exit code is 2. A valid file prints its pipeline: the jobs by stage, when
each runs and what it needs.

rules:changes compares the work tree (uncommitted and untracked files
included) with HEAD's parent, as drover exec does.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := ""
			if len(args) == 1 {
				file = args[0]
			}
			in, c, _, err := workTreeInput(cmd.Context(), file, &pf)
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return usageError(err)
			}
			p, err := ciconfig.Compile(in)
			if err != nil {
				var es ciconfig.Errors
				if errors.As(err, &es) {
					for _, e := range es {
						fmt.Fprintln(cmd.ErrOrStderr(), e)
					}
					s := "s"
					if len(es) == 1 {
						s = ""
					}
					return usageError(fmt.Errorf("%s is invalid: %d error%s", in.File, len(es), s))
				}
				return usageError(err)
			}
			for _, w := range p.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			if quiet {
				return nil
			}
			kind := "branch"
			if c.Tag {
				kind = "tag"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is valid: %d jobs for %s %s\n\n", in.File, len(p.Jobs), kind, c.Ref)
			printPipeline(cmd.OutOrStdout(), p)
			return nil
		},
	}
	pf.add(cmd)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing when the file is valid")
	return cmd
}

// printPipeline prints a pipeline's jobs by stage.
func printPipeline(w io.Writer, p *ciconfig.Pipeline) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tJOB\tWHEN\tNEEDS")
	for _, j := range p.Jobs {
		when := j.When
		if j.When == "delayed" {
			when += " " + j.StartIn.String()
		}
		if j.AllowFailure || len(j.AllowFailureExitCodes) > 0 {
			when += " (may fail)"
		}
		needs := "-"
		if j.HasNeeds {
			names := make([]string, len(j.Needs))
			for i, n := range j.Needs {
				names[i] = n.Job
			}
			needs = "[" + strings.Join(names, ", ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.Stage, j.Name, when, needs)
	}
	tw.Flush()
}
