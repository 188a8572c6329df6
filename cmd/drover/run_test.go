package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// TestRunWorkingDirectory: drover --debug run --working-directory DIR runs
// jobs with their builds in DIR/builds, still reads the --config given
// relative to where it started, and logs at debug level although
// config.toml says error.
func TestRunWorkingDirectory(t *testing.T) {
	clearRegisterEnv(t)
	c, url := testCoordinator(t)
	start, work := t.TempDir(), t.TempDir()
	t.Chdir(start)
	if out, code, err := drover(t, "register", "-c", "config.toml", "-u", url, "-r", c.RegistrationToken(), "--name", "wd"); code != 0 {
		t.Fatalf("register = exit %d (%v)\n%s", code, err, out)
	}
	writeTestFile(t, "config.toml", "log_level = \"error\"\nlog_format = \"text\"\n"+readFile(t, "config.toml"))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out lockedbuf.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--debug", "run", "-c", "config.toml", "--working-directory", work})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	cl := client.New(url, c.AdminToken(), nil)
	j, trace := runJob(t, cl, client.JobSpec{Name: "pwd", Script: []string{"pwd"}}, done, &out)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("drover run = %v after its context ended, want nil", err)
	}

	realWork, err := filepath.EvalSymlinks(work)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != "success" || !strings.Contains(string(trace), realWork+"/builds/") {
		t.Errorf("job %s; its log does not show a directory under %s/builds:\n%s", j.Status, realWork, trace)
	}
	if _, err := os.Stat(filepath.Join(start, "builds")); err == nil {
		t.Errorf("builds were made in %s, where drover started", start)
	}
	if !strings.Contains(out.String(), "runner manager started") {
		t.Errorf("--debug did not override log_level = \"error\":\n%s", out.String())
	}

	// A run that wrongly starts stops with the context.
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	root = newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "-c", filepath.Join(start, "config.toml"), "-d", filepath.Join(start, "nope")})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "--working-directory: chdir") {
		t.Errorf("run -d into a missing directory = %v, want an error naming --working-directory", err)
	}
}

// TestDebugFlag: --debug, before or after the command, is --log-level
// debug (and --verbose) of the commands that have them.
func TestDebugFlag(t *testing.T) {
	for _, args := range [][]string{{"--debug", "probe"}, {"probe", "--debug"}} {
		root := newRootCmd()
		var level string
		var verbose bool
		probe := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error { return nil }}
		probe.Flags().StringVar(&level, "log-level", "info", "")
		probe.Flags().BoolVar(&verbose, "verbose", false, "")
		root.AddCommand(probe)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if level != "debug" || !verbose {
			t.Errorf("%v: --log-level %q, --verbose %v; want debug, true", args, level, verbose)
		}
	}
}

// TestRunGitlabFlags: gitlab-runner run's flags that drover lacks are
// refused by name, long or short.
func TestRunGitlabFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--service", "gitlab-runner"}, "flag --service is a gitlab-runner flag drover does not support (yet): drover does not install itself as a service"},
		{[]string{"run", "-u", "gitlab-runner"}, "flag -u (--user) is a gitlab-runner flag drover does not support (yet): set user in config.toml"},
		{[]string{"run", "--syslog"}, "flag --syslog is a gitlab-runner flag"},
		{[]string{"run", "-x"}, `unknown shorthand flag: 'x' in -x`},
	} {
		out, code, err := drover(t, tc.args...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v = exit %d, %v; want 2 and %q\n%s", tc.args, code, err, tc.want, out)
		}
	}
}

// runJob submits spec through cl and waits until it finished (failing the
// test if the drover run whose end done reports stops first, or after a
// minute), then returns the job and its log; out is that drover run's
// output, for the failure message.
func runJob(t *testing.T, cl *client.Client, spec client.JobSpec, done <-chan error, out fmt.Stringer) (*client.Job, []byte) {
	t.Helper()
	j, err := cl.Submit(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !j.Finished() {
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after a minute; drover run said:\n%s", spec.Name, j.Status, out)
		}
		select {
		case err := <-done:
			t.Fatalf("drover run ended: %v\n%s", err, out)
		case <-time.After(100 * time.Millisecond):
		}
		if j, err = cl.Job(t.Context(), j.ID); err != nil {
			t.Fatal(err)
		}
	}
	trace, _, err := cl.Trace(t.Context(), j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return j, trace
}
