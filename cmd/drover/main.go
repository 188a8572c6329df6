// Command drover is a CI job-running system in the family of GitLab
// Runner: a coordinator that holds the job queue and speaks GitLab's runner
// API v4, and a runner manager that takes jobs from any such coordinator
// and runs them through executors. This file only parses flags and wires
// packages together.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/drover-ci/drover/internal/buildinfo"
)

// version is drover's version (internal/buildinfo: set at link time).
var version = buildinfo.Get().Version

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks a configuration or usage error: exit code 2.
func usageError(err error) error { return &exitError{code: 2, err: err} }

func main() {
	if err := run(os.Args[1:]); err != nil {
		var ee *exitError
		code := 1
		if errors.As(err, &ee) {
			code = ee.code
		}
		if ee == nil || ee.err != nil {
			fmt.Fprintln(os.Stderr, "drover:", err)
		}
		os.Exit(code)
	}
}

func run(args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	return root.Execute()
}
