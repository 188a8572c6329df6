package docker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestStandbyEligible: which jobs may take (and leave) a slot's standby
// build container.
func TestStandbyEligible(t *testing.T) {
	type in struct {
		cfg       func(*Config)
		job       func(*api.JobResponse)
		e         func(*Executor)
		services  int
		stacked   bool
		resumable bool
	}
	cases := []struct {
		name string
		in   in
		want bool
	}{
		{"a plain job", in{}, true},
		{"user root", in{e: func(e *Executor) { e.user = "root" }}, true},
		{"user 0:0", in{e: func(e *Executor) { e.user = "0:0" }}, true},
		{"user 1000", in{e: func(e *Executor) { e.user = "1000" }}, false},
		{"build_standby = false", in{cfg: func(c *Config) { c.BuildStandby = false }}, false},
		{"services", in{services: 1}, false},
		{"an autoscaled instance's engine", in{stacked: true}, false},
		{"resumable", in{resumable: true}, false},
		{"a network of the job's own", in{e: func(e *Executor) { e.network = "n" }}, false},
		{"network_mode", in{cfg: func(c *Config) { c.NetworkMode = "host" }}, false},
		{"an image entrypoint", in{e: func(e *Executor) { e.userEntry = []string{"/entry.sh"} }}, false},
		{"the job's entrypoint", in{job: func(j *api.JobResponse) { j.Image.Entrypoint = []string{""} }}, false},
		{"a variable no shell exports", in{job: func(j *api.JobResponse) {
			j.Variables = append(j.Variables, api.Variable{Key: "1ABC", Value: "x"})
		}}, false},
		{"a file variable of any name", in{job: func(j *api.JobResponse) {
			j.Variables = append(j.Variables, api.Variable{Key: "1ABC", Value: "x", File: true})
		}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{BuildStandby: true}
			job := &api.JobResponse{Variables: api.Variables{{Key: "CI_JOB_ID", Value: "1"}}}
			if tc.in.cfg != nil {
				tc.in.cfg(cfg)
			}
			if tc.in.job != nil {
				tc.in.job(job)
			}
			e := &Executor{cfg: cfg, job: job, resumable: tc.in.resumable}
			if tc.in.e != nil {
				tc.in.e(e)
			}
			if got := e.standbyEligible(tc.in.services, tc.in.stacked); got != tc.want {
				t.Errorf("standbyEligible = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPendingStandby: a standby still being made is waited for by the
// job that takes it (or its context ends the wait); one offered in the
// place of another that was not used has the other removed once made.
func TestPendingStandby(t *testing.T) {
	f := &pendingStandby{spec: "s", done: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if sb, err := f.wait(ctx); sb != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("wait with its context over = %v, %v", sb, err)
	}
	made := &standby{name: "made"}
	got := make(chan *standby, 1)
	go func() {
		sb, err := f.wait(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- sb
	}()
	f.sb = made
	close(f.done)
	if sb := <-got; sb != made {
		t.Errorf("wait = %v, want the standby made", sb)
	}

	var p Provider
	at := standbyKey{i: 1}
	first := &pendingStandby{done: make(chan struct{})}
	second := &pendingStandby{done: make(chan struct{})}
	p.offerStandby(first, at, slog.New(slog.DiscardHandler))
	p.offerStandby(second, at, slog.New(slog.DiscardHandler))
	if got := p.standbys[at]; len(got) != 1 || got[0] != second {
		t.Fatalf("the slot network's standbys are %p, want the last offered (%p) alone: the first is for the same kind of job", got, second)
	}
	close(first.done) // made (failed: nothing to remove); its discard ends
	p.cleanups.Wait()
}

// TestOfferStandbyVariants: a slot network keeps a standby for each of
// the last maxStandbyVariants kinds of job (standbySpec), newest first;
// one for a kind it has replaces the one there, a third kind removes the
// oldest, and another network's standbys are not touched.
func TestOfferStandbyVariants(t *testing.T) {
	made := func(spec string) *pendingStandby {
		// Made: a standby with no containers (its discard removes none).
		f := &pendingStandby{spec: spec, done: make(chan struct{}), sb: &standby{name: spec}}
		close(f.done)
		return f
	}
	failed := &pendingStandby{spec: "failed", done: make(chan struct{})}
	close(failed.done) // making it gave no standby
	specs := func(fs []*pendingStandby) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.spec)
		}
		return out
	}
	log := slog.New(slog.DiscardHandler)
	at, other := standbyKey{i: 0}, standbyKey{i: 1}
	var p Provider
	p.offerStandby(made("x"), other, log)
	steps := []struct {
		offer string
		want  []string
	}{
		{"a", []string{"a"}},
		{"b", []string{"b", "a"}},
		{"a", []string{"a", "b"}}, // the kind it has: the old "a" goes
		{"c", []string{"c", "a"}}, // a third kind: the oldest, "b", goes
		{"c", []string{"c", "a"}},
		{"failed", []string{"failed", "c"}},
		{"d", []string{"d", "c"}}, // the failed one goes before "c" does
	}
	for i, st := range steps {
		f := made(st.offer)
		if st.offer == "failed" {
			f = failed
		}
		p.offerStandby(f, at, log)
		if got := specs(p.standbys[at]); !slices.Equal(got, st.want) {
			t.Fatalf("after offer %d (%q): standbys %q, want %q", i+1, st.offer, got, st.want)
		}
	}
	if got := specs(p.standbys[other]); !slices.Equal(got, []string{"x"}) {
		t.Errorf("the other network's standbys: %q, want [x]", got)
	}
	p.cleanups.Wait()
}

// TestHelperSpec: the helper container a standby brings serves the next
// job only when that job's helper container would be the same one: its
// image, network, mounts and host settings; not the job's own parts.
func TestHelperSpec(t *testing.T) {
	const tag, id = "drover-helper:1", "sha256:aaa"
	base := func() *Executor {
		return &Executor{
			cfg:      &Config{BuildStandby: true},
			job:      &api.JobResponse{ID: 1, JobInfo: api.JobInfo{ProjectID: 7}, Variables: api.Variables{{Key: "A", Value: "1"}}},
			settings: executor.Settings{ShortToken: "tok", ConcurrentID: 0},
			netName:  "container:sb1", sandbox: "sb1", prefix: "drover-tok-job-1",
		}
	}
	want := base().helperSpec(tag, id)
	if want == "" {
		t.Fatal("helperSpec is empty")
	}
	cases := []struct {
		name    string
		change  func(*Executor)
		tag, id string
		same    bool
	}{
		{"the same job again", nil, tag, id, true},
		{"another job of the project, other variables", func(e *Executor) {
			e.job.ID, e.prefix = 2, "drover-tok-job-2"
			e.job.Variables = api.Variables{{Key: "B", Value: "2"}}
		}, tag, id, true},
		{"another helper image", nil, "drover-helper:2", id, false},
		{"the tag now another image", nil, tag, "sha256:bbb", false},
		{"another sandbox", func(e *Executor) { e.netName, e.sandbox = "container:sb2", "sb2" }, tag, id, false},
		{"another project (its cache volume)", func(e *Executor) { e.job.JobInfo.ProjectID = 8 }, tag, id, false},
		{"a host directory mounted", func(e *Executor) { e.cfg.Volumes = []string{"/srv:/data"} }, tag, id, false},
		{"cap_add", func(e *Executor) { e.cfg.CapAdd = []string{"NET_RAW"} }, tag, id, false},
		// The helper never runs privileged, nor with the build's limits.
		{"privileged", func(e *Executor) { e.cfg.Privileged = true }, tag, id, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := base()
			if tc.change != nil {
				tc.change(e)
			}
			if got := e.helperSpec(tc.tag, tc.id); (got == want) != tc.same {
				t.Errorf("helperSpec equal to the first job's: %v, want %v", got == want, tc.same)
			}
		})
	}
}
