package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
)

// TestDockerContainerKeys: [runners.docker] keys GitLab Runner hands to
// the engine, from config.toml to what a job sees, through a real
// coordinator and manager on the local engine; none is warned about at
// start.
func TestDockerContainerKeys(t *testing.T) {
	needDockerImages(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 1, "", `    hostname = "drover-e2e-host"
    oom_score_adjust = 250
    group_add = ["4321"]
    network_mtu = 1300
    pid_mode = "host"
    disable_entrypoint_overwrite = false
    enable_ipv6 = false
    [runners.docker.ulimit]
      nofile = "1000:2000"`)
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)

	_, log := runSuccess(t, cl, client.JobSpec{Name: "container keys", Script: []string{
		`echo "host=$(hostname)"`,
		`echo "oom=$(cat /proc/self/oom_score_adj)"`,
		`echo "nofile=$(ulimit -n):$(ulimit -Hn)"`,
		`echo "mtu=$(cat /sys/class/net/eth0/mtu)"`,
		`id -G | tr ' ' '\n' | grep -qx 4321 && echo "group=4321"`,
		`[ "$(cat /proc/1/comm)" != sh ] && echo "pid=host"`,
	}}, 3*time.Minute)
	for _, want := range []string{"Running on drover-e2e-host", "host=drover-e2e-host\n", "oom=250\n", "nofile=1000:2000\n",
		"mtu=1300\n", "group=4321\n", "pid=host\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("the job's log lacks %q:\n%s", want, log)
		}
	}
	if out := m.log.String(); strings.Contains(out, "runners[0].docker") {
		t.Errorf("the manager warned about the docker keys:\n%s", out)
	}
}
