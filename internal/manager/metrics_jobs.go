package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/executor"
)

// jobsDesc is GitLab Runner's gitlab_runner_jobs (commands/builds_helper.go):
// the jobs being run, by runner and by where each one is.
var jobsDesc = prometheus.NewDesc("gitlab_runner_jobs", "The current number of running builds.",
	[]string{"runner", "runner_name", "system_id", "state", "stage", "executor_stage"}, nil)

// jobsCollector counts the manager's running jobs (Manager.jobs) at each
// scrape, grouped by runner, state, stage and executor stage.
type jobsCollector struct{ m *Manager }

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ runner, name, state, stage, exec string }
	counts := map[key]int{}
	c.m.mu.Lock()
	for _, j := range c.m.jobs {
		state, stage, exec := j.where()
		counts[key{j.runner, j.runnerName, state, stage, exec}]++
	}
	c.m.mu.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), k.runner, k.name, c.m.opts.SystemID, k.state, k.stage, k.exec)
	}
}

// where is j's state, stage and executor stage in GitLab Runner's terms:
// state pending until the executor is prepared, running while the build's
// stages run, then the build's result while its final update is sent;
// stage is the build stage (executor.Stage, "" before the first); the
// executor stage is GitLab's created, prepare and finish, and "run" while
// a build stage runs (GitLab's shell executor names none there, its docker
// executor docker_run).
func (j *jobRun) where() (state, stage, execStage string) {
	var s executor.Stage
	if j.stage != nil {
		s = j.stage()
	}
	if r := j.result.Load(); r != nil {
		return *r, string(s), "finish"
	}
	switch s {
	case "":
		return "pending", "", "created"
	case executor.StagePrepareExecutor:
		return "pending", string(s), "prepare"
	case executor.StageFinished:
		return "running", string(s), "finish"
	}
	return "running", string(s), "run"
}
