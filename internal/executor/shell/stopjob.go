package shell

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// jobDirPrefix starts the name of a job's script directory; the job id
// follows.
const jobDirPrefix = "drover-shell-job"

// StopJob stops the stages that a manager which died left running for job
// jobID, when nothing else is known of the job (its resume record is
// lost): it finds the job's script directories by name, stops every stage
// whose claim shows no exit code (TERM to its process group, grace, KILL)
// and removes the directories. It returns how many stages it stopped.
func (p *Provider) StopJob(ctx context.Context, jobID int64) (int, error) {
	base := scriptBase()
	if base == "" {
		base = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(base, fmt.Sprintf("%s%d-*", jobDirPrefix, jobID)))
	if err != nil {
		return 0, fmt.Errorf("stop job %d: %w", jobID, err)
	}
	stopped := 0
	for _, dir := range dirs {
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, pidPath := range pids {
			stem := strings.TrimSuffix(pidPath, ".pid")
			files := stageFiles{script: stem + ".sh", pid: pidPath, exit: stem + ".exit"}
			if _, err := os.Stat(files.exit); err == nil {
				continue // the stage ended
			}
			proc, err := attachStage(files)
			if err != nil {
				continue // vanished already
			}
			grace := 10 * time.Second
			if d, ok := ctx.Deadline(); ok {
				grace = min(grace, time.Until(d)/2)
			}
			proc.stop(grace)
			proc.finish(drainTimeout)
			stopped++
		}
		if err := os.RemoveAll(dir); err != nil {
			return stopped, fmt.Errorf("stop job %d: %w", jobID, err)
		}
	}
	return stopped, nil
}
