package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
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

// standbyRig runs jobs on a one-slot docker manager that say which
// container they ran in, and lists the slot's standby build containers.
type standbyRig struct {
	t       *testing.T
	c       *coordinator
	own     string   // the label filter of the test's containers
	used    []string // containers jobs ran in
	project string   // of the next job
}

// standbyScript prints the job's container id and variable, whether a
// job before left a file or a process in its container, then leaves
// both.
var standbyScript = []string{
	`echo cid=$(sed -n 's|.*/docker/\([0-9a-f]\{64\}\).*|\1|p' /proc/self/cgroup | head -n 1)`,
	`echo "var=$STANDBY_VAR"`,
	`if [ -e /tmp/left-by-a-job ]; then echo SAW-FILE; else echo no-file; fi`,
	`if ps | grep -v grep | grep -q 'sleep 6[0]0'; then echo SAW-PROCESS; else echo no-process; fi`,
	`touch /tmp/left-by-a-job; sleep 600 >/dev/null 2>&1 &`,
}

var standbyCidRE = regexp.MustCompile(`(?m)^cid=(\S*)$`)

// list lists the standby build containers no job ran in yet (a standby
// a job took keeps its name and role until it is removed with the job);
// all: every standby container, helpers too.
func (r *standbyRig) list(all bool) []string {
	out, err := exec.Command("docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}", "--filter", "label="+dockerexec.LabelRole+"=standby", "--filter", r.own).CombinedOutput()
	if err != nil {
		r.t.Fatalf("docker ps: %v\n%s", err, out)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, name, ok := strings.Cut(line, " ")
		if ok && (all || strings.HasSuffix(name, "-build") && !slices.Contains(r.used, id)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// wait waits for n unused standby build containers (the test's timeout
// bounds the wait) and returns them.
func (r *standbyRig) wait(n int) []string {
	r.t.Helper()
	for {
		if s := r.list(false); len(s) >= n {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs job n of r.project and returns the container it ran in, and
// its log; it fails the test unless the job saw its own variable and no
// file or process of an earlier job.
func (r *standbyRig) run(n int) (cid, log string) {
	t := r.t
	t.Helper()
	vars := []map[string]any{{"key": "STANDBY_VAR", "value": fmt.Sprintf("value-%d", n)}}
	id := submitJSON(t, r.c, map[string]any{"name": fmt.Sprintf("job %d", n), "project": r.project, "script": standbyScript, "variables": vars})
	cl := r.c.client()
	j := waitJob(t, cl, id, 3*time.Minute, finished)
	log = trace(t, cl, id)
	if j.Status != "success" {
		t.Fatalf("job %d: %s %s\n%s", n, j.Status, j.FailureReason, log)
	}
	for _, s := range []string{fmt.Sprintf("var=value-%d", n), "no-file", "no-process"} {
		if !strings.Contains(log, "\n"+s+"\n") {
			t.Errorf("job %d: log lacks the line %q:\n%s", n, s, log)
		}
	}
	m := standbyCidRE.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("job %d: no cid line:\n%s", n, log)
	}
	if m[1] == "" {
		t.Skip("the job cannot see its container's id (/proc/self/cgroup names no /docker/<id>: cgroup v2?)")
	}
	r.used = append(r.used, m[1])
	return m[1], log
}

// TestDockerStandby: a slot network's next build container is made when
// a job on it ends (for the slot's other network, while the slot's first
// job runs), and the next job on that network takes it (its container id
// is one of the standbys there before it started): with its
// own variables, none of the files or processes of the jobs before it. A
// job of another project takes none. A manager started after this one
// removes the standbys it left.
func TestDockerStandby(t *testing.T) {
	needDockerImages(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 1, "", "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	r := &standbyRig{t: t, c: c, own: "label=" + testLabel + "=" + testName(t), project: "group/standby"}
	// Job 1 takes the slot's first network and, while it runs, readies
	// the other one with a standby for the next job (warmOtherNetwork),
	// and leaves a standby on its own: jobs 2 to 4 take them.
	r.run(1)
	before := r.wait(2)
	cid, log := r.run(2)
	if !slices.Contains(before, cid) {
		t.Errorf("job 2 ran in container %s, not in one of the standbys %v made for it:\n%s", cid, before, log)
	}
	before = r.wait(2)
	for n := 3; n <= 4; n++ {
		cid, log := r.run(n)
		if !slices.Contains(before, cid) {
			t.Errorf("job %d ran in container %s, not in one of the standbys %v:\n%s", n, cid, before, log)
		}
	}
	// Another project's job: its build container would not be the
	// standby (another working directory, host name), which it leaves
	// for the job after it.
	before = r.wait(2)
	r.project = "group/other"
	cid, _ = r.run(5)
	if slices.Contains(before, cid) {
		t.Errorf("job 5 of another project ran in a standby (%s)", cid)
	}
	// The slot ends with three standbys: one per network for the first
	// project, and job 5's for its own on its network (the test's timeout
	// bounds the wait).
	for len(r.list(false)) != 3 {
		time.Sleep(50 * time.Millisecond)
	}
	// A manager that is killed leaves its standbys; the next one
	// removes them as it starts; one that stops removes its own.
	m.signal(syscall.SIGKILL)
	m.wait(time.Minute)
	m = start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	for len(r.list(true)) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	r.run(6)
	r.wait(1)
	m.signal(syscall.SIGTERM)
	if code := m.wait(time.Minute); code != 0 {
		t.Errorf("the manager exited %d on SIGTERM", code)
	}
	if s := r.list(true); len(s) > 0 {
		t.Errorf("standbys left by a manager that stopped: %v", s)
	}
}

// TestDockerStandbyVariants: a slot network keeps the standbys of its
// last two kinds of job. Jobs of two projects come two by two (the
// slot's networks take turns: each network sees A, B, A): the project
// B jobs make their own build containers and leave project A's standbys
// on the networks, and the project A jobs after them run in those
// standbys, made before the B jobs ran beside them, with no file or
// process of any job before.
func TestDockerStandbyVariants(t *testing.T) {
	needDockerImages(t)
	c, _ := startDockerManager(t, 1)
	r := &standbyRig{t: t, c: c, own: "label=" + testLabel + "=" + testName(t), project: "group/a"}
	r.run(1)
	r.run(2)
	kept := r.wait(2) // project A's, one per network
	r.project = "group/b"
	for n := 3; n <= 4; n++ {
		if cid, log := r.run(n); slices.Contains(kept, cid) {
			t.Errorf("job %d of project B ran in project A's standby %s:\n%s", n, cid, log)
		}
	}
	// A job waits for the removal of the job before it on its network,
	// which gives back the standbys it did not use: no wait here.
	r.project = "group/a"
	for n := 5; n <= 6; n++ {
		if cid, log := r.run(n); !slices.Contains(kept, cid) {
			t.Errorf("job %d of project A ran in %s, not in one of A's standbys %v kept beside project B's jobs:\n%s", n, cid, kept, log)
		}
	}
}

// TestDockerStandbyHelper: a standby made after a job that had a helper
// container (here for its cache) brings a helper container too, and the
// next job that needs one takes it: jobs 2 and 3 of a slot whose jobs
// restore and save a cache start no helper container of their own (the
// engine's create events of their helper role say so; job 1's say that
// the filter sees one), and each restores what the one before saved. A
// job that needs no helper removes the standby's with its containers,
// and the standby after it brings none.
func TestDockerStandbyHelper(t *testing.T) {
	needDockerImages(t)
	since := time.Now().Unix()
	c, cl := startDockerManager(t, 1)
	own := "label=" + testLabel + "=" + testName(t)
	standbys := func(suffix string) int {
		out, err := exec.Command("docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+dockerexec.LabelRole+"=standby", "--filter", own).CombinedOutput()
		if err != nil {
			t.Fatalf("docker ps: %v\n%s", err, out)
		}
		n := 0
		for _, name := range strings.Fields(string(out)) {
			if strings.HasSuffix(name, suffix) {
				n++
			}
		}
		return n
	}
	// waitStandbys waits for builds standby build containers and helpers
	// standby helper containers (the test's timeout bounds the wait).
	waitStandbys := func(builds, helpers int) {
		t.Helper()
		for standbys("-build") != builds || standbys("-helper") != helpers {
			time.Sleep(50 * time.Millisecond)
		}
	}
	run := func(n int, cached bool) (int64, string) {
		t.Helper()
		spec := map[string]any{"name": fmt.Sprintf("job %d", n), "project": "group/helper",
			"script": []string{`echo "cache=$(cat c/f 2>/dev/null || echo none)"`, fmt.Sprintf("mkdir -p c && echo %d > c/f", n)}}
		if cached {
			spec["cache"] = []any{map[string]any{"key": "k", "paths": []string{"c/"}}}
		}
		id := submitJSON(t, c, spec)
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d: %s %s\n%s", n, j.Status, j.FailureReason, log)
		}
		return id, log
	}
	helpersMade := func(job int64) []string {
		t.Helper()
		out, err := exec.Command("docker", "events", "--since", strconv.FormatInt(since, 10), "--until", strconv.FormatInt(time.Now().Unix()+1, 10),
			"--filter", "type=container", "--filter", "event=create", "--filter", own,
			"--filter", "label="+dockerexec.LabelJob+"="+strconv.FormatInt(job, 10), "--filter", "label="+dockerexec.LabelRole+"=helper",
			"--format", "{{.Actor.Attributes.name}}").CombinedOutput()
		if err != nil {
			t.Fatalf("docker events: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	// Job 1 starts its own helper, and readies the slot's other network
	// with a standby that has one; its own network's next standby, made
	// after it, has one too.
	first, log := run(1, true)
	if !strings.Contains(log, "\ncache=none\n") {
		t.Errorf("job 1 restored a cache it had none of:\n%s", log)
	}
	if got := helpersMade(first); len(got) != 1 {
		t.Fatalf("job 1 made helper containers %q, want its own one (the events' filter is wrong?)", got)
	}
	waitStandbys(2, 2)
	for n := 2; n <= 3; n++ {
		id, log := run(n, true)
		if want := fmt.Sprintf("\ncache=%d\n", n-1); !strings.Contains(log, want) {
			t.Errorf("job %d: its log lacks %q (the cache job %d saved):\n%s", n, strings.TrimSpace(want), n-1, log)
		}
		if got := helpersMade(id); len(got) > 0 {
			t.Errorf("job %d made helper containers %q instead of taking its standby's", n, got)
		}
		waitStandbys(2, 2)
	}
	// A job without a cache, git or artifacts needs no helper: the one
	// its standby brought goes with its containers, and the standby made
	// after it has none (the other network's keeps its own).
	run(4, false)
	waitStandbys(2, 1)
	out, err := exec.Command("docker", "ps", "-a", "--format", "{{.Names}}", "--filter", own, "--filter", "label="+dockerexec.LabelRole+"=helper").CombinedOutput()
	if err != nil || len(strings.Fields(string(out))) > 0 {
		t.Errorf("job helper containers left: %q (%v)", out, err)
	}
}
