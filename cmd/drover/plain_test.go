package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestPlainWriter(t *testing.T) {
	log := "\x1b[0KRunning with drover 1\n" +
		"section_start:1700000000:prepare_executor\r\x1b[0K\x1b[0K\x1b[36;1mPreparing the \"shell\" executor\x1b[0;m\n" +
		"section_end:1700000001:prepare_executor\r\x1b[0K\n" +
		"section_start:1700000002:step_script[collapsed=true]\r\x1b[0K\x1b[32;1m$ echo hi\x1b[0;m\nhi\n" +
		"section_end:1700000003:step_script\r\x1b[0K\n\x1b[32;1mJob succeeded\x1b[0;m"
	want := "Running with drover 1\nPreparing the \"shell\" executor\n\n$ echo hi\nhi\n\nJob succeeded"
	// GitLab Runner 19's per-line timestamps go too.
	log = "2026-11-25T04:48:50.705123Z 00O " + strings.ReplaceAll(log, "\nhi\n", "\n2026-11-25T04:48:50.9Z 01O+hi\n")
	// Any cut of the log into writes gives the same text.
	for cut := 1; cut <= len(log); cut += 7 {
		var out bytes.Buffer
		p := &plainWriter{w: &out, escapes: true, timestamps: true}
		for i := 0; i < len(log); i += cut {
			if _, err := p.Write([]byte(log[i:min(i+cut, len(log))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("writes of %d bytes:\n got %q\nwant %q", cut, out.String(), want)
		}
	}
}

// TestUsageErrorsExit2: every usage mistake exits with code 2.
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"nope"},
		{"jobs", "--limit", "x"},
		{"jobs", "--nope"},
		{"logs"},
		{"logs", "1", "2"},
		{"autoscale", "nope"},
		{"version", "x"},
		{"coordinator", "extra"},
	} {
		if out, code, _ := drover(t, args...); code != 2 {
			t.Errorf("drover %v: exit %d, want 2\n%s", args, code, out)
		}
	}
	if _, code, err := drover(t); code != 0 {
		t.Errorf("drover with no arguments: exit %d (%v), want 0 (help)", code, err)
	}
}

// TestRunnerLogFormat: --log-format runner writes GitLab Runner's format:
// no time, a level prefix for the rest than info, the message padded to a
// column, the attributes in their order.
func TestRunnerLogFormat(t *testing.T) {
	var out bytes.Buffer
	log, err := newLogger(&out, "debug", "runner")
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("runner", "abc123")
	log.Info("Checking for jobs... received", "job", 42, "repo_url", "https://x/y.git")
	log.Warn("job request failed", "err", errors.New("connection refused"), "status", 0)
	log.Error("bad", slog.Group("g", "k", "v w"))
	log.Debug("quiet")
	line := func(msg, attrs string) string { return fmt.Sprintf("%-40s%s\n", msg, attrs) }
	want := line("Checking for jobs... received", "runner=abc123 job=42 repo_url=https://x/y.git") +
		line("WARNING: job request failed", `runner=abc123 err="connection refused" status=0`) +
		line("ERROR: bad", `runner=abc123 g.k="v w"`) +
		line("DEBUG: quiet", "runner=abc123")
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
