package manager

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/jobstore"
)

// A corrupt job record cannot be resumed, but the job should not stay
// "running" at the coordinator until its timeout. A record is damaged most
// often by truncation, and the tokens come early in it (the runner token
// first, then the payload, which starts with the job's id and token), so
// they can usually still be read from what is left.
var (
	salvageRunnerToken = regexp.MustCompile(`"runner_token"\s*:\s*"([^"\\]+)"`)
	salvageJobToken    = regexp.MustCompile(`"job"\s*:\s*\{[^{}]*?"token"\s*:\s*"([^"\\]+)"`)
)

// salvageCorrupt fails upstream the job of a corrupt file-store record that
// was moved to name.corrupt, when the tokens it needs can still be read.
func (m *Manager) salvageCorrupt(ctx context.Context, name string, jobID int64) {
	log := m.logger.With("job_id", jobID, "record", name)
	data, err := os.ReadFile(name + "." + jobstore.CorruptSuffix)
	if err != nil || jobID == 0 {
		log.Warn("corrupt record: cannot fail its job upstream (unreadable, or no job id in its name); the coordinator's reaper will", "err", err)
		return
	}
	rt, jt := salvageRunnerToken.FindSubmatch(data), salvageJobToken.FindSubmatch(data)
	if rt == nil || jt == nil {
		log.Warn("corrupt record: its tokens are lost; the coordinator's reaper will end the job")
		return
	}
	r := m.runnerByToken(string(rt[1]))
	if r == nil {
		log.Warn("corrupt record: its runner is not in the configuration")
		return
	}
	client, err := m.client(r)
	if err != nil {
		log.Warn("corrupt record: bad coordinator url", "err", err)
		return
	}
	token := string(jt[1])
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if js, ok := m.opts.Providers[r.Executor].(executor.JobStopper); ok {
		if n, err := js.StopJob(ctx, jobID); err != nil {
			log.Warn("corrupt record: stopping the job's processes failed", "err", err)
		} else if n > 0 {
			log.Info("corrupt record: stopped the job's leftover stages", "stages", n)
		}
	}
	if size, _, err := client.TraceSize(ctx, jobID, token); err == nil {
		line := fmt.Sprintf("\n\x1b[31;1mERROR: Job failed (system failure): the runner manager's record of this job (%s) is corrupt; the job cannot be resumed\x1b[0;m\n", name)
		if _, err := client.PatchTrace(ctx, jobID, token, size, []byte(line)); err != nil {
			log.Warn("corrupt record: could not write the reason to the job log", "err", err)
		}
	}
	info := api.VersionInfo{Name: "drover", Version: m.opts.Version, Executor: r.Executor, FleetURL: m.opts.FleetURL}
	resp, err := client.UpdateJob(ctx, jobID, api.UpdateJobRequest{Info: info, Token: token, State: api.StateFailed, FailureReason: api.RunnerSystemFailure})
	switch {
	case err != nil:
		log.Warn("corrupt record: failing the job upstream failed", "err", err)
	case resp.StatusCode == http.StatusOK:
		log.Info("corrupt record: its job was failed upstream with runner_system_failure")
	default:
		log.Info("corrupt record: the coordinator no longer runs its job", "status", resp.StatusCode, "job_status", resp.JobStatus)
	}
}
