package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestDockerSectionAttempts: EXECUTOR_JOB_SECTION_ATTEMPTS as GitLab
// Runner's docker executor has it. The build container of a running
// step_script is removed under the job: with 2 attempts the stage runs
// again, in the same log section, in a new container (the builds volume
// kept what the first run wrote) and the job succeeds; with the default,
// 1, the job fails as a system failure.
func TestDockerSectionAttempts(t *testing.T) {
	needDockerImages(t)
	c, cl := startDockerManager(t, 2)
	for _, tc := range []struct {
		name     string
		attempts string
		status   string
	}{
		{"retried", "2", "success"},
		{"default", "", "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"name": tc.name, "timeout": 300, "script": []string{
				// The builds volume outlives the container: the second run
				// finds what the first wrote (a file of this job's own).
				`if [ -e "first-run-$CI_JOB_ID" ]; then echo "second run, after $(cat "first-run-$CI_JOB_ID")"; exit 0; fi`,
				`echo the-first-run > "first-run-$CI_JOB_ID"`, "echo first-run-waiting", "sleep 300",
			}}
			if tc.attempts != "" {
				spec["variables"] = []map[string]any{{"key": "EXECUTOR_JOB_SECTION_ATTEMPTS", "value": tc.attempts}}
			}
			id := submitJSON(t, c, spec)
			waitJob(t, cl, id, 3*time.Minute, func(j *client.Job) bool {
				return j.Status == "running" && strings.Contains(trace(t, cl, id), "first-run-waiting")
			})
			// The build container runs the stage's sleep: one the job
			// made has its labels, a standby it took (the slot's) has not.
			out, err := exec.Command("docker", "ps", "-q", "--filter", "label="+testLabel+"="+testName(t), "--filter", "name=-build").Output()
			if err != nil {
				t.Fatalf("docker ps: %v", err)
			}
			var ids []string
			for _, c := range strings.Fields(string(out)) {
				top, err := exec.Command("docker", "top", c).Output()
				if err == nil && strings.Contains(string(top), "sleep 300") {
					ids = append(ids, c)
				}
			}
			if len(ids) != 1 {
				t.Fatalf("the job's build container (the one running its sleep): %q", ids)
			}
			if out, err := exec.Command("docker", "rm", "-f", ids[0]).CombinedOutput(); err != nil {
				t.Fatalf("docker rm -f %s: %v\n%s", ids[0], err, out)
			}
			j := waitJob(t, cl, id, 3*time.Minute, finished)
			log := trace(t, cl, id)
			if j.Status != tc.status {
				t.Errorf("status = %s %s, want %s\nlog:\n%s", j.Status, j.FailureReason, tc.status, log)
			}
			if tc.status == "success" {
				for _, s := range []string{"The environment running step_script was lost. Will retry...", "Retrying step_script", "second run, after the-first-run"} {
					if !strings.Contains(log, s) {
						t.Errorf("log lacks %q:\n%s", s, log)
					}
				}
				if n := strings.Count(log, ":step_script\r"); n != 2 {
					t.Errorf("%d step_script section markers, want 2 (one section):\n%s", n, log)
				}
			} else if j.FailureReason != "runner_system_failure" || strings.Contains(log, "Retrying step_script") {
				t.Errorf("failure reason %q, want runner_system_failure without a retry:\n%s", j.FailureReason, log)
			}
			waitNoResources(t, id)
		})
	}
}
