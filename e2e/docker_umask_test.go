package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// TestDockerDisableUmask runs a git job in containers whose user is not
// root, without and with FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR (a job
// variable): by default the helper writes the checkout under umask 0000
// (root's files, writable by everyone); with the flag it keeps its umask
// and the checkout is given to the container's user (uid 1000), as
// GitLab Runner does. Both times the user can write the checkout.
func TestDockerDisableUmask(t *testing.T) {
	c, repo, shas := startNonRootDocker(t, 1, "")
	cl := c.client()
	tests := []struct {
		flag    string
		want    []string
		notWant []string
	}{
		{flag: "", want: []string{"owner=0:0 mode=666"}, notWant: []string{"Not using umask", "Changing ownership"}},
		{flag: "true", want: []string{
			"Not using umask - FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR is set!",
			`Changing ownership of files at "/builds/`, `" to 1000:1000`,
			"owner=1000:1000 mode=644",
		}},
	}
	for _, tt := range tests {
		vars := []map[string]any{{"key": "GIT_STRATEGY", "value": "clone"}}
		if tt.flag != "" {
			vars = append(vars, map[string]any{"key": "FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR", "value": tt.flag})
		}
		id := submitJSON(t, c, map[string]any{
			"name": "umask " + tt.flag, "project": "group/repo",
			"script": []string{
				`echo "owner=$(stat -c %u:%g file.txt) mode=$(stat -c %a file.txt)"`,
				"echo changed >> file.txt && echo checkout-writable",
			},
			"variables": vars,
			"git":       map[string]any{"repo_url": "file://" + repo, "ref": "main", "sha": shas[1]},
		})
		j := waitJob(t, cl, id, 2*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("flag %q: job = %s %s\n%s", tt.flag, j.Status, j.FailureReason, log)
		}
		for _, w := range append(tt.want, "checkout-writable") {
			if !strings.Contains(log, w) {
				t.Errorf("flag %q: log lacks %q:\n%s", tt.flag, w, log)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(log, w) {
				t.Errorf("flag %q: log has %q:\n%s", tt.flag, w, log)
			}
		}
	}
}

// startNonRootDocker starts a coordinator and a manager with a docker
// runner (concurrent slots, runner lines added to its entry) whose
// containers run as the test images' user (uid 1000), and a repository
// of two commits they can read; it returns the coordinator, the
// repository and its commits once the manager runs.
func startNonRootDocker(t *testing.T, concurrent int, runner string) (*coordinator, string, []string) {
	t.Helper()
	needDockerImages(t)
	dir := t.TempDir()
	repo, shas := gitRepo(t)
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), concurrent, runner, fmt.Sprintf("    volumes = [%q]\n    user = %q", repo+":"+repo+":ro", dockerimage.TestUser))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	return c, repo, shas
}
