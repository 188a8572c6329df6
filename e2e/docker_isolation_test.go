package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// TestDockerJobsIsolated: jobs of one slot share no network, files or
// processes. Job A serves a file over HTTP from a background process,
// prints its address and, as root, adds a line to /etc/hosts; the two
// jobs after it (handed out as A ends, while its containers are being
// removed, on the slot's two networks, in their sandboxes: the second
// in A's, whose address it has) cannot reach it, see its files, its
// process or its line. A job with a service is followed by one that cannot
// reach the service by its alias.
func TestDockerJobsIsolated(t *testing.T) {
	needDockerImages(t)
	c, cl := startDockerManager(t, 1)
	a := submitJSON(t, c, map[string]any{"name": "serves", "script": []string{
		"mkdir -p /tmp/www && echo secret-of-job-a > /tmp/www/index.html && httpd -p 8080 -h /tmp/www",
		"wget -qO- http://127.0.0.1:8080/ && echo ip=$(hostname -i)", "echo '10.6.6.6 poisoned.example' >> /etc/hosts", "sleep 3"}})
	var ip string
	ipRE := regexp.MustCompile(`ip=([0-9.]+)`)
	waitJob(t, cl, a, 2*time.Minute, func(*client.Job) bool {
		m := ipRE.FindStringSubmatch(trace(t, cl, a))
		if m != nil {
			ip = m[1]
		}
		return m != nil
	})
	probe := []string{
		"if wget -T 3 -qO- http://" + ip + ":8080/; then echo REACHED-A; else echo a-unreachable; fi",
		"if [ -e /tmp/www/index.html ]; then echo SAW-A-FILES; else echo no-a-files; fi",
		"if ps | grep -v grep | grep -q httpd; then echo SAW-A-PROCESS; else echo no-a-process; fi",
		"if grep -q poisoned /etc/hosts; then echo SAW-A-HOSTS; else echo no-a-hosts; fi",
		"echo here=$(hostname -i)",
	}
	b := submitJSON(t, c, map[string]any{"name": "next", "script": probe})
	d := submitJSON(t, c, map[string]any{"name": "after next", "script": probe})
	svc := submitJSON(t, c, map[string]any{"name": "service", "script": []string{"wget -qO- http://web:8080/"},
		"services": []any{map[string]any{"name": dockerimage.TestImageService, "alias": "web"}}})
	after := submitJSON(t, c, map[string]any{"name": "after service", "script": []string{
		"if wget -T 3 -qO- http://web:8080/; then echo REACHED-SERVICE; else echo service-unreachable; fi"}})
	cases := []struct {
		name string
		id   int64
		has  []string
	}{
		{"serves", a, []string{"secret-of-job-a"}},
		{"next", b, []string{"a-unreachable", "no-a-files", "no-a-process", "no-a-hosts"}},
		{"after next", d, []string{"a-unreachable", "no-a-files", "no-a-process", "no-a-hosts", "here=" + ip}},
		{"service", svc, []string{"drover service ok"}},
		{"after service", after, []string{"service-unreachable"}},
	}
	for _, tc := range cases {
		j := waitJob(t, cl, tc.id, 3*time.Minute, finished)
		log := trace(t, cl, tc.id)
		if j.Status != "success" {
			t.Errorf("%s: status %s %s\n%s", tc.name, j.Status, j.FailureReason, log)
		}
		// A probe's answer is a line of its own: the log also has each
		// command, answers included, behind "$ ".
		for _, s := range tc.has {
			if !strings.Contains(log, "\n"+s+"\n") {
				t.Errorf("%s: log lacks the line %q:\n%s", tc.name, s, log)
			}
		}
		for _, s := range []string{"REACHED-A", "SAW-A-FILES", "SAW-A-PROCESS", "SAW-A-HOSTS", "REACHED-SERVICE"} {
			if strings.Contains(log, "\n"+s+"\n") {
				t.Errorf("%s: log has the line %q:\n%s", tc.name, s, log)
			}
		}
	}
	for _, tc := range cases {
		waitNoResources(t, tc.id)
	}
}

// TestDockerSandboxProjects: jobs of two projects on one slot, in turn
// and then the second project's in a row. Each job's host name is GitLab Runner's for
// its own project, whether it joined the slot's sandbox, joined the slot
// network itself (the sandbox was the other project's) or had the
// sandbox made anew for its project.
func TestDockerSandboxProjects(t *testing.T) {
	needDockerImages(t)
	c, cl := startDockerManager(t, 1)
	script := []string{"echo host=$(hostname)"}
	var ids []int64
	// The coordinator hands the projects' jobs out in turn while both
	// have some (a b a b a b), then b's in a row: each network of the
	// slot gets jobs of both projects in turn, then b's.
	for _, p := range []string{"group/a", "group/a", "group/a", "group/b", "group/b", "group/b", "group/b", "group/b", "group/b"} {
		ids = append(ids, submitJSON(t, c, map[string]any{"name": "host", "project": p, "script": script}))
	}
	runningOn := regexp.MustCompile(`Running on (\S+) via`)
	hostIs := regexp.MustCompile(`(?m)^host=(\S+)$`)
	hosts := map[string]bool{}
	for _, id := range ids {
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d: %s %s\n%s", id, j.Status, j.FailureReason, log)
		}
		want, got := runningOn.FindStringSubmatch(log), hostIs.FindStringSubmatch(log)
		if want == nil || got == nil || got[1] != want[1] {
			t.Errorf("job %d: host name %v, want the one prepare_script names, %v:\n%s", id, got, want, log)
			continue
		}
		hosts[got[1]] = true
	}
	if len(hosts) != 2 {
		t.Errorf("host names %v: want one for each project", hosts)
	}
	for _, id := range ids {
		waitNoResources(t, id)
	}
}
