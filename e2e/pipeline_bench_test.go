package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// fiftyJobs is a .gitlab-ci.yml of 50 trivial jobs in 5 stages of 10.
func fiftyJobs() string {
	var s strings.Builder
	s.WriteString("stages: [s1, s2, s3, s4, s5]\n")
	for st := 1; st <= 5; st++ {
		for j := 1; j <= 10; j++ {
			fmt.Fprintf(&s, "job-%d-%d:\n  stage: s%d\n  script: [\"true\"]\n", st, j, st)
		}
	}
	return s.String()
}

// BenchmarkPipeline50 measures a pipeline of 50 trivial jobs in 5 stages on
// the shell executor (concurrent = 8), from POST /api/v1/pipelines until it
// has finished, against the same 50 jobs (same repository and commit)
// submitted one by one through the admin API, stage after stage, each
// stage when the one before has finished: what the scheduler costs over a
// client doing its work. Both are measured in each iteration, interleaved.
func BenchmarkPipeline50(b *testing.B) {
	s := newStack(b, 8)
	defer s.stop()
	ctx := context.Background()
	repo, sha := ciRepo(b, map[string]string{".gitlab-ci.yml": fiftyJobs()})
	git := &client.Git{RepoURL: "file://" + repo, Ref: "main", Sha: sha}
	pipeline := func() time.Duration {
		start := time.Now()
		p, err := s.api.CreatePipeline(ctx, client.PipelineSpec{Project: "b/p", RepoURL: "file://" + repo, Ref: "main", SHA: sha})
		if err != nil {
			b.Fatal(err)
		}
		for {
			// The list's view of the pipeline (no jobs): as light a
			// question as the baseline's one job.
			ps, err := s.api.Pipelines(ctx, "b/p", 1)
			if err != nil || len(ps) != 1 || ps[0].ID != p.ID {
				b.Fatalf("pipelines of b/p = %+v, %v", ps, err)
			}
			got := &ps[0]
			if got.Finished() {
				if got.Status != "success" {
					b.Fatalf("pipeline %d: %s", p.ID, got.Status)
				}
				return time.Since(start)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	submitted := func() time.Duration {
		start := time.Now()
		for st := 1; st <= 5; st++ {
			var ids []int64
			for j := 1; j <= 10; j++ {
				job, err := s.api.Submit(ctx, client.JobSpec{Name: fmt.Sprintf("job-%d-%d", st, j), Project: "b/s", Stage: fmt.Sprintf("s%d", st), Script: []string{"true"}, Git: git})
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, job.ID)
			}
			for _, id := range ids {
				for {
					got, err := s.api.Job(ctx, id)
					if err != nil {
						b.Fatal(err)
					}
					if got.Finished() {
						if got.Status != "success" {
							b.Fatalf("job %d: %s", id, got.Status)
						}
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		return time.Since(start)
	}
	pipeline() // warm: the repository cache, the builds directories
	submitted()
	var pl, sub time.Duration
	b.ResetTimer()
	for b.Loop() {
		pl += pipeline()
		sub += submitted()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(pl.Seconds()/n, "pipeline-s")
	b.ReportMetric(sub.Seconds()/n, "submitted-s")
	b.ReportMetric(pl.Seconds()/sub.Seconds(), "pipeline/submitted")
}

// BenchmarkExec5Jobs measures `drover exec` of a 5-job pipeline (2 stages,
// a need, artifacts) from the command's start until it exits, against
// running the same 5 scripts with bash one after another (the floor: no
// CI at all).
func BenchmarkExec5Jobs(b *testing.B) {
	repo, _ := ciRepo(b, map[string]string{".gitlab-ci.yml": `
build:
  stage: build
  script: [mkdir -p out, echo built > out/app]
  artifacts: {paths: [out/]}
lint:
  stage: build
  script: ["true"]
unit:
  stage: test
  needs: [build]
  script: [cat out/app]
e2e:
  stage: test
  script: [cat out/app]
docs:
  stage: test
  needs: []
  script: ["true"]
`})
	scripts := "mkdir -p out; echo built > out/app; true; cat out/app; cat out/app; true"
	run := func(name string, args ...string) time.Duration {
		start := time.Now()
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return time.Since(start)
	}
	run(droverBin, "exec", "--quiet")
	var ex, sh time.Duration
	b.ResetTimer()
	for b.Loop() {
		ex += run(droverBin, "exec", "--quiet")
		sh += run("bash", "-c", scripts)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(ex.Seconds()*1000/n, "exec-ms")
	b.ReportMetric(sh.Seconds()*1000/n, "bash-ms")
}
