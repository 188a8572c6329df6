package difftest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ReadRecording reads a recording written by the suite.
func ReadRecording(path string) (*Recording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Recording
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// A Rule is a deliberate difference between drover and GitLab Runner:
// lines of either log it rewrites the same way (or drops) before the two
// are compared. docs/differential.md lists them; the table is short.
type Rule struct {
	ID, Why string
	// Match selects the lines; Replace rewrites them ("" with Drop
	// drops them).
	Match   *regexp.Regexp
	Replace string
	Drop    bool
}

// Deliberate are drover's deliberate differences in the job log.
var Deliberate = []Rule{
	{
		ID:    "banner",
		Why:   "the first line names the runner and its version",
		Match: regexp.MustCompile(`^(\x1b\[0KRunning with )(gitlab-runner|drover) .*$`), Replace: "${1}<runner>",
	},
}

// startUpdates is the deliberate difference "two-phase-accept" in the
// job updates: drover's manager reports its preparation through
// runner_provisioning (pending keep-alives, then accepted: see
// docs/fault-tolerance.md) where GitLab Runner sends PUT state=running as
// it takes the job. The accept counts as the running update; the
// keep-alives drop.
func startUpdates(states []string) []string {
	var out []string
	for _, s := range states {
		switch s {
		case "provisioning:pending":
			continue
		case "provisioning:accepted":
			s = "running"
		}
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// applyRules rewrites a log by the rules.
func applyRules(lines []string) []string {
	var out []string
	for _, l := range lines {
		drop := false
		for _, r := range Deliberate {
			if !r.Match.MatchString(l) {
				continue
			}
			if r.Drop {
				drop = true
				break
			}
			l = r.Match.ReplaceAllString(l, r.Replace)
		}
		if !drop {
			out = append(out, l)
		}
	}
	return out
}

// Compare returns how got differs from want, the recording, after the
// deliberate differences: nothing when they agree.
func Compare(want, got Observation) []string {
	var d []string
	field := func(name string, w, g any) {
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		if string(wb) != string(gb) {
			d = append(d, fmt.Sprintf("%s: GitLab Runner %s, drover %s", name, wb, gb))
		}
	}
	field("state", want.State, got.State)
	field("failure_reason", want.FailureReason, got.FailureReason)
	field("exit_code", want.ExitCode, got.ExitCode)
	field("updates", startUpdates(want.Updates), startUpdates(got.Updates))
	field("artifacts", want.Artifacts, got.Artifacts)
	field("cache", want.Cache, got.Cache)
	wt, gt := applyRules(want.Trace), applyRules(got.Trace)
	if !slices.Equal(wt, gt) {
		d = append(d, "trace (- GitLab Runner, + drover):\n"+lineDiff(wt, gt))
	}
	return d
}

// lineDiff is a minimal line diff of a and b (longest common
// subsequence), unchanged lines shown with two spaces.
func lineDiff(a, b []string) string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			fmt.Fprintf(&sb, "  %q\n", a[i])
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&sb, "+ %q\n", b[j])
			j++
		default:
			fmt.Fprintf(&sb, "- %q\n", a[i])
			i++
		}
	}
	return sb.String()
}
