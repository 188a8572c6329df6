package docker

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// TestDebugServicesLogs: with CI_DEBUG_SERVICES (Settings.DebugServices)
// what a service prints on stdout and stderr reaches the job's log as
// GitLab Runner writes it ("[service:<names>] " in grey, the engine's
// timestamp, the line), until Cleanup, after which nothing more is
// written; without it nothing of the service's is in the log; a job a job
// store keeps gets a warning instead (its log is written again byte for
// byte on resume).
func TestDebugServicesLogs(t *testing.T) {
	cli := realEngine(t)
	token := "svcl" + randomHex(t, 4)
	t.Cleanup(func() { removeRunnerVolumes(t, cli, token) })
	line := regexp.MustCompile(`(?m)^\x1b\[0;37m\[service:svc-drover-test-busybox\] \d{4}-\d\d-\d\dT\S+Z (out|err) line\x1b\[0;m$`)
	for i, tc := range []struct {
		name           string
		debug, durable bool
	}{
		{name: "streamed", debug: true},
		{name: "off"},
		{name: "resumable job", debug: true, durable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := parseDockerTable(t, "[runners.docker]\npull_policy = \"if-not-present\"\nhelper_image = \""+dockerimage.TestImageBusybox+"\"\nwait_for_services_timeout = -1\n")
			p, err := NewProvider(Options{Lookup: func(executor.Settings) (*Config, error) { return cfg, nil }, Dialer: fixedDialer{cli}})
			if err != nil {
				t.Fatal(err)
			}
			job := &api.JobResponse{
				ID: 990200 + int64(i), Token: "svc-token",
				JobInfo: api.JobInfo{ProjectID: 42, ProjectFullPath: "g/p"},
				Image:   api.Image{Name: dockerimage.TestImageBusybox},
				Services: []api.Image{{Name: dockerimage.TestImageBusybox, Alias: "svc",
					Entrypoint: []string{"sh", "-c", "echo out line; echo err line >&2; exec sleep 3600"}}},
			}
			ex := p.Create().(*Executor)
			trace := &executortest.Trace{}
			s := executor.Settings{ShortToken: token, SystemID: "s_svclogs", RunnerName: "svclogs", ConcurrentID: i,
				DebugServices: tc.debug, Resumable: tc.durable}
			if err := ex.Prepare(t.Context(), executor.PrepareOptions{Job: job, Settings: s, Trace: trace}); err != nil {
				t.Fatalf("Prepare: %v\n%s", err, trace)
			}
			if tc.debug && !tc.durable {
				// The lines come when the engine sends them: wait for
				// both (the bound only ends a test that already failed).
				for end := time.Now().Add(2 * time.Minute); len(line.FindAllString(trace.String(), -1)) < 2; {
					if time.Now().After(end) {
						t.Fatalf("the service's two lines never reached the job's log:\n%q", trace)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 2*time.Minute)
			defer cancel()
			ex.Cleanup(ctx)
			after := trace.String()
			if err := p.Wait(ctx); err != nil {
				t.Errorf("cleanup: %v", err)
			}
			if err := p.RemoveSlotNetworks(ctx); err != nil {
				t.Errorf("RemoveSlotNetworks: %v", err)
			}
			if got := trace.String(); got != after {
				t.Errorf("written after Cleanup returned: %q", strings.TrimPrefix(got, after))
			}
			got := line.FindAllString(after, -1)
			switch {
			case tc.debug && !tc.durable:
				if len(got) != 2 || !strings.Contains(after, "] ") {
					t.Errorf("want the service's out and err lines once each, got %q in:\n%q", got, after)
				}
			case strings.Contains(after, "[service:"):
				t.Errorf("the service's output is in the log:\n%q", after)
			}
			if warned := strings.Contains(after, "WARNING: CI_DEBUG_SERVICES"); warned != tc.durable {
				t.Errorf("warning in the log: %v, want %v:\n%q", warned, tc.durable, after)
			}
		})
	}
}
