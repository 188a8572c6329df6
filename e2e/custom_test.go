package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// customDriver writes an executable shell script for the custom executor.
func customDriver(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// directoryDriver is [runners.custom] of examples/custom-executor/directory
// with base as the jobs' base directory.
func directoryDriver(t testing.TB, base string) string {
	t.Helper()
	d, err := filepath.Abs("../examples/custom-executor/directory")
	if err != nil {
		t.Fatal(err)
	}
	args := fmt.Sprintf("[%q]", base)
	return fmt.Sprintf(`  [runners.custom]
    config_exec = %q
    config_args = %s
    prepare_exec = %q
    prepare_args = %s
    run_exec = %q
    run_args = %s
    resume_exec = %q
    resume_args = %s
    cleanup_exec = %q
    cleanup_args = %s
    graceful_kill_timeout = 5
`, d+"/config.sh", args, d+"/prepare.sh", args, d+"/run.sh", args, d+"/resume.sh", args, d+"/cleanup.sh", args)
}

func submitJob(t *testing.T, cl *client.Client, spec client.JobSpec) int64 {
	t.Helper()
	spec.Variables = append(spec.Variables, client.Variable{Key: "GIT_STRATEGY", Value: "none"})
	return submit(t, cl, spec).ID
}

// TestCustomExecutorStages runs jobs with executor = "custom" and a
// recording driver through a real coordinator and drover run: every
// driver is called in GitLab Runner's order with its arguments, GitLab's
// stage names and the CUSTOM_ENV_* environment; the exit codes map to
// script_failure (with the script's code from BUILD_EXIT_CODE_FILE) and
// runner_system_failure.
func TestCustomExecutorStages(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	rec := `echo "$(basename "$0") $* job=$CUSTOM_ENV_CI_JOB_ID my=$CUSTOM_ENV_MY_VAR from_config=${FROM_CONFIG-unset} codes=$BUILD_FAILURE_EXIT_CODE/$SYSTEM_FAILURE_EXIT_CODE" >>` + calls + "\n"
	cfgExec := customDriver(t, dir, "config", rec+`echo '{"builds_dir": "`+dir+`/builds/'$CUSTOM_ENV_CI_JOB_ID'", "cache_dir": "`+dir+`/cache", "driver": {"name": "recorder", "version": "0.1"}, "job_env": {"FROM_CONFIG": "yes"}}'`+"\n")
	prepare := customDriver(t, dir, "prepare", rec+"echo prepared in $CUSTOM_ENV_CI_PROJECT_DIR\n")
	run := customDriver(t, dir, "run", rec+`shift
case "$2:$CUSTOM_ENV_FAIL" in
build_script:system) exit "$SYSTEM_FAILURE_EXIT_CODE" ;;
build_script:unknown) exit 5 ;;
esac
bash "$1"
code=$?
[ "$code" = 0 ] && exit 0
echo "$code" >"$BUILD_EXIT_CODE_FILE"
exit "$BUILD_FAILURE_EXIT_CODE"
`)
	cleanup := customDriver(t, dir, "cleanup", rec)
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 1, "custom", fmt.Sprintf(`  [runners.custom]
    config_exec = %q
    config_args = ["c1"]
    prepare_exec = %q
    run_exec = %q
    run_args = ["rarg"]
    cleanup_exec = %q
    cleanup_args = ["x", "y"]
`, cfgExec, prepare, run, cleanup))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	callLog := func() string {
		b, _ := os.ReadFile(calls)
		_ = os.Remove(calls)
		return string(b)
	}

	ok := submitJob(t, cl, client.JobSpec{Name: "ok", Script: []string{"echo in $PWD", "echo done > out.txt"},
		AfterScript: []string{"echo after"}, Variables: []client.Variable{{Key: "MY_VAR", Value: "v1"}}})
	j := waitJob(t, cl, ok, 60*time.Second, finished)
	log := trace(t, cl, ok)
	if j.Status != "success" {
		t.Fatalf("job = %s (%s):\n%s", j.Status, j.FailureReason, log)
	}
	project := fmt.Sprintf("%s/builds/%d/", dir, ok)
	for _, want := range []string{`Preparing the "custom" executor`, "Using Custom executor with driver recorder 0.1...",
		"prepared in " + project, "in " + project, "after"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if files, _ := filepath.Glob(project + "*/*/out.txt"); len(files) != 1 {
		t.Errorf("out.txt in the project directory: %v, want one", files)
	}
	// The job's final update follows cleanup_exec: the log is complete.
	got := callLog()
	env := fmt.Sprintf("job=%d my=v1", ok)
	var want []string
	want = append(want, fmt.Sprintf("config c1 %s from_config=unset codes=1/2", env), fmt.Sprintf("prepare  %s from_config=yes codes=1/2", env))
	for _, stage := range []string{"prepare_script", "get_sources", "build_script", "after_script"} {
		want = append(want, "run rarg <script> "+stage+" "+env+" from_config=yes codes=1/2")
	}
	want = append(want, fmt.Sprintf("cleanup x y %s from_config=yes codes=1/2", env))
	lines := strings.Split(strings.TrimSpace(got), "\n")
	for i, l := range lines {
		// The script's path is in the job's TMPDIR: only its shape is known.
		if f := strings.Fields(l); len(f) > 3 && f[0] == "run" && strings.Contains(f[2], "/drover-custom-job") {
			f[2] = "<script>"
			lines[i] = strings.Join(f, " ")
		}
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("call log:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	for _, tc := range []struct {
		name, fail, script, status, reason, text string
	}{
		{"script failure", "", "exit 3", "failed", "script_failure", "ERROR: Job failed: exit status 3"},
		{"system failure", "system", "true", "failed", "runner_system_failure", "the driver reported a system failure (exit code 2"},
		{"unknown exit code", "unknown", "true", "failed", "runner_system_failure", "unknown custom executor exit code 5"},
	} {
		id := submitJob(t, cl, client.JobSpec{Name: tc.name, Script: []string{tc.script}, Variables: []client.Variable{{Key: "FAIL", Value: tc.fail}}})
		j := waitJob(t, cl, id, 60*time.Second, finished)
		log := trace(t, cl, id)
		if j.Status != tc.status || j.FailureReason != tc.reason || !strings.Contains(log, tc.text) {
			t.Errorf("%s: job = %s (%s), want %s (%s) with %q:\n%s", tc.name, j.Status, j.FailureReason, tc.status, tc.reason, tc.text, log)
		}
		if got := callLog(); !strings.Contains(got, fmt.Sprintf("cleanup x y job=%d ", id)) {
			t.Errorf("%s: cleanup_exec did not run:\n%s", tc.name, got)
		}
	}
	m.signal(syscall.SIGTERM)
	if code := m.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// TestCustomExecutorCancelAndTimeout: with the directory driver, a cancel
// and a job timeout end run_exec with SIGTERM to its process group; its
// trap stops the stage it runs detached (the job's processes die), and
// cleanup_exec still runs (the job's directory is gone).
func TestCustomExecutorCancelAndTimeout(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "jobs")
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 2, "custom", directoryDriver(t, base))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()

	for _, tc := range []struct {
		name    string
		timeout int
		status  string
		reason  string
	}{
		{"cancel", 0, "canceled", ""},
		{"timeout", 3, "failed", "job_execution_timeout"},
	} {
		pidFile := filepath.Join(dir, tc.name+".pid")
		id := submitJob(t, cl, client.JobSpec{Name: tc.name, Timeout: tc.timeout,
			Script: []string{fmt.Sprintf("sleep 600 & echo $! > %s.tmp; mv %s.tmp %s; wait", pidFile, pidFile, pidFile)}})
		var pid int
		waitFor(t, 60*time.Second, tc.name+": the job's sleep started", func() bool {
			b, err := os.ReadFile(pidFile)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid > 0
		})
		if tc.timeout == 0 {
			if _, err := cl.Cancel(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		j := waitJob(t, cl, id, 60*time.Second, finished)
		if j.Status != tc.status || j.FailureReason != tc.reason {
			t.Errorf("%s: job = %s (%s), want %s (%s):\n%s", tc.name, j.Status, j.FailureReason, tc.status, tc.reason, trace(t, cl, id))
		}
		if pidAlive(pid) {
			t.Errorf("%s: the job's sleep %d still runs after the job ended", tc.name, pid)
		}
		if _, err := os.Stat(filepath.Join(base, fmt.Sprintf("job-%d", id))); !os.IsNotExist(err) {
			t.Errorf("%s: the job's directory is still there (cleanup_exec did not run): %v", tc.name, err)
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

// TestCustomExecutorInvalidConfig: a config_exec printing something that
// is not the JSON configuration fails the job with runner_system_failure,
// with the first lines of its output in the log.
func TestCustomExecutorInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	cfgExec := customDriver(t, dir, "config", "echo 'builds_dir=/tmp/x'\necho '{\"driver\": {\"name\": \"x\"}, \"build_dir\": \"/x\"}'\n")
	run := customDriver(t, dir, "run", "exit 0\n")
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 1, "custom",
		fmt.Sprintf("  [runners.custom]\n    config_exec = %q\n    run_exec = %q\n", cfgExec, run))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	id := submitJob(t, cl, client.JobSpec{Name: "bad config", Script: []string{"true"}})
	j := waitJob(t, cl, id, 60*time.Second, finished)
	log := trace(t, cl, id)
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s (%s), want failed (runner_system_failure):\n%s", j.Status, j.FailureReason, log)
	}
	for _, want := range []string{"config_exec printed no valid configuration: not a JSON object", "builds_dir=/tmp/x\n", `"build_dir": "/x"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestCustomExecutorMissingDriver: a driver that does not exist or is not
// executable keeps drover run from starting (exit 2), naming file, line
// and key.
func TestCustomExecutorMissingDriver(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ table, want string }{
		{"  [runners.custom]\n    run_exec = \"" + dir + "/missing.sh\"\n", ":13: runners[0].custom.run_exec: driver " + dir + "/missing.sh: no such file or directory"},
		{"  [runners.custom]\n    run_exec = \"/bin/true\"\n    prepare_exec = \"" + plain + "\"\n", ":14: runners[0].custom.prepare_exec: driver " + plain + ": permission denied"},
	} {
		cfg := writeRunnerConfig(t, dir, "http://127.0.0.1:1", "glrt-x", 1, "custom", "  builds_dir = \"/b\"\n  cache_dir = \"/c\"\n"+tc.table)
		out, code := runCLI(t, dir, nil, "run", "--config", cfg)
		if code != 2 || !strings.Contains(out, cfg+tc.want) {
			t.Errorf("run = exit %d, want 2 with %q:\n%s", code, cfg+tc.want, out)
		}
	}
}

// TestCustomExecutorResume: the directory driver is resumable; with a
// file store, jobs printing numbered lines survive three SIGKILLs of the
// manager: each succeeds with every line exactly once, in order (no byte
// of the stage's output lost or doubled), and nothing of them is left.
func TestCustomExecutorResume(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "jobs")
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "3s")
	cl := c.client()
	// resume_exec, recorded: the jobs must really be resumed through it.
	resumes := filepath.Join(dir, "resumes")
	driver := directoryDriver(t, base)
	example, _ := filepath.Abs("../examples/custom-executor/directory/resume.sh")
	rec := customDriver(t, dir, "resume", fmt.Sprintf("echo \"$CUSTOM_ENV_CI_JOB_ID $CUSTOM_RESUME_STAGE $CUSTOM_RESUME_OFFSET\" >>%s\nexec %s \"$@\"\n", resumes, example))
	driver = strings.Replace(driver, fmt.Sprintf("resume_exec = %q", example), fmt.Sprintf("resume_exec = %q", rec), 1)
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 2, "custom", driver+fileStore(filepath.Join(dir, "store")))
	marker := fmt.Sprintf("custom-resume-%d", time.Now().UnixNano())
	const jobs, lines = 3, 40
	var ids []int64
	for i := range jobs {
		ids = append(ids, submitJob(t, cl, numberedJob(fmt.Sprintf("job%02d", i), marker, lines, "0.1")))
	}
	m := killRestart(t, dir, cfg, 3, 700, 900)
	checkChaosJobs(t, cl, ids, lines, 120*time.Second)
	if left := waitNoLeftovers(marker, 10*time.Second); len(left) > 0 {
		t.Errorf("job processes left behind: %v", left)
	}
	if entries, _ := os.ReadDir(base); len(entries) > 0 {
		t.Errorf("job directories left behind: %v", entries)
	}
	b, _ := os.ReadFile(resumes)
	t.Logf("resume_exec calls (job, stage, offset):\n%s", b)
	if len(b) == 0 {
		t.Error("resume_exec was never called")
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}

// TestRegisterCustomExecutor: `drover register --executor custom` writes
// the [runners.custom] of its --custom-* flags and says what is missing.
func TestRegisterCustomExecutor(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := filepath.Join(dir, "config.toml")
	out, code := runCLI(t, dir, nil, "register", "--config", cfg, "--url", c.url, "--token", c.runnerToken(t),
		"--executor", "custom", "--name", "cu", "--custom-config-exec", "/opt/driver/config.sh",
		"--custom-prepare-exec", "/opt/driver/prepare.sh", "--custom-cleanup-exec", "/opt/driver/cleanup.sh",
		"--custom-cleanup-exec-timeout", "60", "--custom-run-args", "a", "--custom-run-args", "b")
	if code != 0 {
		t.Fatalf("register = exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "needs run_exec") || !strings.Contains(out, "--custom-run-exec") {
		t.Errorf("register output does not ask for run_exec:\n%s", out)
	}
	b, err := os.ReadFile(cfg)
	for _, want := range []string{`executor = "custom"`, "[runners.custom]", `config_exec = "/opt/driver/config.sh"`,
		`prepare_exec = "/opt/driver/prepare.sh"`, `cleanup_exec = "/opt/driver/cleanup.sh"`, "cleanup_exec_timeout = 60", `run_args = ["a", "b"]`} {
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("config.toml lacks %q (%v):\n%s", want, err, b)
		}
	}
	out, code = runCLI(t, dir, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, "runners[0].custom: run_exec is required") {
		t.Errorf("run = exit %d, want 2 naming the missing run_exec:\n%s", code, out)
	}
}

// TestCustomExecutorDockerDriver: examples/custom-executor/docker runs a
// job in a container of the job's image through the docker CLI, a
// failing script fails the job with its exit code, and the container is
// gone after each job.
func TestCustomExecutorDockerDriver(t *testing.T) {
	needDockerImages(t)
	dir := t.TempDir()
	d, err := filepath.Abs("../examples/custom-executor/docker")
	if err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := writeRunnerConfig(t, dir, c.url, c.runnerToken(t), 1, "custom", fmt.Sprintf(`  [runners.custom]
    config_exec = %q
    prepare_exec = %q
    run_exec = %q
    cleanup_exec = %q
`, d+"/config.sh", d+"/prepare.sh", d+"/run.sh", d+"/cleanup.sh"))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	cl := c.client()
	image := &client.Image{Name: dockerimage.TestImageBash}
	ok := submitJob(t, cl, client.JobSpec{Name: "in docker", Image: image, Script: []string{"test -f /.dockerenv && echo in-a-container at $PWD"}})
	j := waitJob(t, cl, ok, 120*time.Second, finished)
	if log := trace(t, cl, ok); j.Status != "success" || !strings.Contains(log, "in-a-container at /builds/") {
		t.Errorf("job = %s (%s), want success in a container:\n%s", j.Status, j.FailureReason, log)
	}
	bad := submitJob(t, cl, client.JobSpec{Name: "fails", Image: image, Script: []string{"exit 4"}})
	j = waitJob(t, cl, bad, 120*time.Second, finished)
	if log := trace(t, cl, bad); j.Status != "failed" || j.FailureReason != "script_failure" || !strings.Contains(log, "exit status 4") {
		t.Errorf("job = %s (%s), want failed (script_failure) with exit status 4:\n%s", j.Status, j.FailureReason, log)
	}
	for _, id := range []int64{ok, bad} {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", fmt.Sprintf("label=drover-custom-job=%d", id)).Output()
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("job %d's container %s is left", id, s)
			_ = exec.Command("docker", "rm", "-f", s).Run()
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
}
