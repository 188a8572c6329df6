package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale/runnerpool"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/docker"
)

// autoscaledExamples returns the configurations of an autoscaled runner
// that a Markdown file shows: ```toml blocks, and files that its ```sh
// blocks write whole (cat > x.toml <<'EOF' ... EOF).
func autoscaledExamples(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(data)
	for {
		i := strings.Index(rest, "\n```")
		if i < 0 {
			return blocks
		}
		info, after, _ := strings.Cut(rest[i+4:], "\n")
		block, after, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatalf("%s: a ``` block is not closed", path)
		}
		rest = after
		switch info {
		case "toml":
		case "sh":
			// a heredoc that writes a .toml file whole
			_, body, ok := strings.Cut(block, ".toml <<'EOF'\n")
			if !ok || !strings.Contains(block, "cat > ") {
				continue
			}
			if block, _, ok = strings.Cut(body, "\nEOF"); !ok {
				continue
			}
		default:
			continue
		}
		// Whole configurations: a fragment of one table (the billing
		// keys) is not one.
		if strings.Contains(block, "[[runners]]") && (strings.Contains(block, "[runners.autoscaler]") || strings.Contains(block, "[runners.machine]")) {
			blocks = append(blocks, block+"\n")
		}
	}
}

// loadExample reads one documented configuration as drover run would and
// fails the test on any error or warning, a pool that concurrent or limit
// keeps from filling included.
func loadExample(t *testing.T, name, src string) (path string, cfg *config.Config) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warns, err := config.Load(path)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, src)
	}
	dockerWarns, err := (&docker.Runners{}).Apply(path, cfg)
	if err != nil {
		t.Fatalf("%s: [runners.docker]: %v", name, err)
	}
	specs, err := runnerpool.ParseAll(path, cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(specs) != len(cfg.Runners) {
		t.Errorf("%s: %d autoscaled runners of %d", name, len(specs), len(cfg.Runners))
	}
	warns = append(warns, dockerWarns...)
	for _, sp := range specs {
		if msg := sp.Policy.CapWarning(sp.Name); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
		warns = append(warns, sp.Warnings...)
	}
	for _, w := range warns {
		t.Errorf("%s: warning %s", name, w)
	}
	return path, cfg
}

// The autoscaled runner of docs/autoscaling.md and the examples of
// docs/autoscaler.md are configurations drover takes without a word: in
// particular, their concurrent lets the pool fill up.
func TestDocumentedAutoscalerExamples(t *testing.T) {
	readme := autoscaledExamples(t, filepath.Join("..", "..", "docs", "autoscaling.md"))
	if len(readme) != 1 {
		t.Fatalf("docs/autoscaling.md: %d autoscaled examples, want 1", len(readme))
	}
	loadExample(t, "docs/autoscaling.md", readme[0])
	docs := autoscaledExamples(t, filepath.Join("..", "..", "docs", "autoscaler.md"))
	if len(docs) != 4 {
		t.Fatalf("docs/autoscaler.md: %d autoscaled examples, want 4 (the pool in both dialects, two billing models)", len(docs))
	}
	for i, src := range docs {
		loadExample(t, "docs/autoscaler.md example "+string(rune('1'+i)), src)
	}
}

// The tuning commands of docs/autoscaling.md on its example: the
// synthetic day runs to the end (no job left queued) and meets the 30 s
// p95 the sweep targets with idle_count 0, as `drover autoscale sweep`
// reports. With the README's old example (no concurrent, so 1 job at once) 19,787 of the
// 20,000 jobs were still queued.
func TestReadmeAutoscalerTuning(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates a 20,000-job day")
	}
	t.Parallel() // seconds of CPU, many under -race
	readme := autoscaledExamples(t, filepath.Join("..", "..", "docs", "autoscaling.md"))
	if len(readme) != 1 {
		t.Fatalf("docs/autoscaling.md: %d autoscaled examples, want 1", len(readme))
	}
	path, cfg := loadExample(t, "docs/autoscaling.md", readme[0])
	pol, err := runnerPolicy(cfg, path, "")
	if err != nil {
		t.Fatal(err)
	}
	// drover autoscale trace --seed 1 --jobs 20000
	jobs, err := tracegen.Generate(tracegen.Options{Seed: 1, Jobs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	// drover autoscale sweep's defaults, with --idle-counts 0.
	o := simulate.Options{Policy: pol, BootTime: 30 * time.Second, BootSpread: 5 * time.Second, Seed: 1}
	best, all, err := simulate.SweepIdleCount(t.Context(), o, jobs, []int{0}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r := all[0].Report; best == nil || r.Unstarted != 0 {
		t.Errorf("idle_count 0: p95 wait %.1f s, %d jobs still queued; want ≤ 30 s and none", r.WaitP95, r.Unstarted)
	}
}

// The cloud examples of docs/fleeting.md are configurations drover takes
// without a word once their plugins are installed where `drover fleeting
// install` puts them (stand-in programs here: nothing runs them).
func TestDocumentedFleetingExamples(t *testing.T) {
	docs := autoscaledExamples(t, filepath.Join("..", "..", "docs", "fleeting.md"))
	if len(docs) != 4 {
		t.Fatalf("docs/fleeting.md: %d autoscaled examples, want 4 (AWS, Google Cloud, Azure, Hetzner)", len(docs))
	}
	root := t.TempDir()
	t.Setenv("FLEETING_PLUGIN_PATH", root)
	for _, repo := range []string{
		"registry.gitlab.com/gitlab-org/fleeting/plugins/aws",
		"registry.gitlab.com/gitlab-org/fleeting/plugins/googlecloud",
		"registry.gitlab.com/gitlab-org/fleeting/plugins/azure",
		"registry.gitlab.com/hetznercloud/fleeting-plugin-hetzner",
	} {
		prog := filepath.Join(root, filepath.FromSlash(repo), "1.0.0", "plugin")
		if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, src := range docs {
		path, cfg := loadExample(t, "docs/fleeting.md example "+string(rune('1'+i)), src)
		specs, err := runnerpool.ParseAll(path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range specs {
			if !strings.HasPrefix(sp.PluginPath, root) {
				t.Errorf("docs/fleeting.md example %d: plugin %q resolved to %q, want the installed one", i+1, sp.Plugin, sp.PluginPath)
			}
		}
	}
}
