package vm

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// Program is a hypervisor's command line tool (VBoxManage, prlctl): each
// Run is one command. Nothing retries.
type Program struct {
	// Name names it in errors ("VBoxManage").
	Name string
	// Path is its binary.
	Path string
}

// ProgramError is a command that failed: its arguments and what it
// wrote to stderr.
type ProgramError struct {
	Program string
	Args    []string
	Stderr  string
	Err     error
}

// Error names the command with its arguments and says what it wrote to
// stderr, else how it failed.
func (e *ProgramError) Error() string {
	msg := e.Stderr
	if msg == "" {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s %s: %s", e.Program, strings.Join(e.Args, " "), msg)
}

// Unwrap returns Err: how the command failed (an *exec.ExitError, or the
// error that kept it from starting).
func (e *ProgramError) Unwrap() error { return e.Err }

// Run runs the program with args and returns its standard output; a
// failure is a *ProgramError, or ctx's error wrapped when ctx ended.
func (p Program) Run(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p.Path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s %s: %w", p.Name, strings.Join(args, " "), ctx.Err())
		}
		return stdout.String(), &ProgramError{Program: p.Name, Args: args, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.String(), nil
}

// Version is the version a hypervisor last reported (GitLab Runner
// prints it before each job). The zero value has none; safe for
// concurrent use.
type Version struct {
	mu sync.Mutex
	v  string
}

// Set records the version.
func (v *Version) Set(version string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.v = version
}

// Product is product followed by the version, if known.
func (v *Version) Product(product string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.v == "" {
		return product
	}
	return product + " " + v.v
}
