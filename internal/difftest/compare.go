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
	// Lines, when set, rewrites the whole log instead: for the rules that
	// split, join or select lines.
	Lines func([]string) []string
}

// Deliberate are drover's deliberate differences in the job log, applied
// in this order.
var Deliberate = []Rule{
	{
		ID:    "layout",
		Why:   "how the same text is laid out in lines and escape codes, which the job page renders alike",
		Lines: layout,
	},
	{
		ID:    "banner",
		Why:   "the first line names the runner and its version",
		Match: regexp.MustCompile(`^(Running with )(gitlab-runner|drover) .*$`), Replace: "${1}<runner>",
	},
	{
		ID:    "helper-log",
		Why:   "GitLab Runner moves artifacts and caches with its helper binary, whose own log lines (its platform, request ids) drover, doing it in-process, has not",
		Lines: helperLog,
	},
	{
		ID:    "transfer-detail",
		Why:   "drover's helper says how much it moved: a line before each upload, the size of each cache archive, the files and bytes of a download",
		Lines: transferDetail,
	},
	{
		ID:    "docker-setup",
		Why:   "how each runner sets up the docker executor's containers: GitLab Runner logs its pull policy, each image's id and its helper image at every stage, and a service's link on the default bridge; drover logs each image once, and building its own helper image",
		Match: dockerSetupLine, Drop: true,
	},
	{
		ID:    "debug-trace",
		Why:   "with CI_DEBUG_TRACE the shell traces each runner's own generated script",
		Lines: debugTrace,
	},
}

var (
	// sectionMarker is a section's start or end marker.
	sectionMarker = regexp.MustCompile(`section_(?:start|end):T:[^\r]*\r\x1b\[0K`)
	// helperFields is the tail of a line of GitLab Runner's helper
	// binary: a reset, padding and key=value fields.
	helperFields = regexp.MustCompile(`\s*\x1b\[0;m(?:(?:\s+(?:\x1b\[0;33m)?[a-z_]+(?:\x1b\[0;m)?=\S*)+\s*|\s+)$`)
	// transferSize is the size drover's helper adds to a transfer line.
	transferSize = regexp.MustCompile(` \(\d+ files, \d+ bytes\)$`)
	// transferProgress is drover's helper's line before an upload, and
	// its line on a cache archive's size.
	transferProgress = regexp.MustCompile(`^(Uploading artifacts as "[^"]*" to coordinator\.\.\. \(\d+ files, \d+ bytes\)|Archive is \d+ bytes \(\d+ files, \d+ bytes uncompressed\))$`)
	// dockerSetupLine is a line of the docker executor about finding an
	// image (GitLab Runner's pull manager's and helper image's, drover's;
	// a pull, which the suite's local images never need, is kept) or
	// GitLab Runner's about a service container leaving the default
	// bridge, which drover's job networks do not use.
	dockerSetupLine = regexp.MustCompile(`^(\x1b\[32;1mUsing default image\x1b\[0;m|Using effective pull policy of .*|Using locally found image .*|Using docker image .*|Using helper image: .*|Checking for the helper image .*|Built the helper image .*|\x1b\[32;1mContainer \S+ disconnected from network bridge\x1b\[0;m)$`)
	// xtrace is a line of the shell's trace (set -x): one or more '+'.
	xtrace = regexp.MustCompile(`^\++ `)
)

// layout puts every section marker at the start of a line of its own
// (GitLab Runner 19 writes a section's end and the next one's start on
// one line; drover ends a line after each end) and drops the erase-line
// and reset codes around plain lines, and doubled resets.
func layout(lines []string) []string {
	var out []string
	for _, l := range lines {
		for len(l) > 0 {
			locs := sectionMarker.FindAllStringIndex(l, -1)
			cut := len(l)
			for _, loc := range locs {
				if loc[0] > 0 {
					cut = loc[0]
					break
				}
			}
			part := l[:cut]
			l = l[cut:]
			// A section end's marker is a line of its own too.
			if strings.HasPrefix(part, "section_end:") {
				if loc := sectionMarker.FindStringIndex(part); loc != nil && loc[1] < len(part) {
					out = append(out, part[:loc[1]])
					part = part[loc[1]:]
				}
			}
			out = append(out, plain(part))
		}
	}
	return out
}

// plain drops the erase-line code before, and the reset after, a line
// that is otherwise uncoloured, and doubled resets.
func plain(l string) string {
	l = strings.ReplaceAll(l, "\x1b[0;m\x1b[0;m", "\x1b[0;m")
	if rest, ok := strings.CutPrefix(l, "\x1b[0K"); ok && !strings.HasPrefix(rest, "\x1b") {
		l = strings.TrimSuffix(rest, "\x1b[0;m")
	}
	return l
}

// helperLog drops the helper binary's platform line and the padding and
// fields of its other lines (a coloured line keeps its reset).
func helperLog(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "Runtime platform ") {
			continue
		}
		if loc := helperFields.FindStringIndex(l); loc != nil {
			l = l[:loc[0]]
			if strings.HasPrefix(l, "\x1b[") {
				l += "\x1b[0;m"
			}
		}
		out = append(out, l)
	}
	return out
}

// transferDetail drops what drover's helper adds about sizes.
func transferDetail(lines []string) []string {
	var out []string
	for _, l := range lines {
		if transferProgress.MatchString(l) {
			continue
		}
		out = append(out, transferSize.ReplaceAllString(l, ""))
	}
	return out
}

// debugTrace keeps, of a log with the shell's trace in it, the section
// markers and the runner's coloured lines: what the scripts print between
// them is interleaved with the trace of scripts each runner writes its
// own way.
func debugTrace(lines []string) []string {
	if !slices.ContainsFunc(lines, xtrace.MatchString) {
		return lines
	}
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "section_") || strings.HasPrefix(l, "\x1b[3") {
			out = append(out, l)
		}
	}
	return out
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
	for _, r := range Deliberate {
		if r.Lines != nil {
			lines = r.Lines(lines)
		}
	}
	for _, l := range lines {
		drop := false
		for _, r := range Deliberate {
			if r.Match == nil || !r.Match.MatchString(l) {
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

// streamOrder is the deliberate difference "stderr-order": GitLab
// Runner reads a script's stdout and stderr through two pipes, so a
// stderr line can land in its log after stdout lines the script wrote
// later; drover keeps the order the script wrote them in. Each of
// GitLab Runner's stderr lines is taken out of both logs (its first
// occurrence in drover's); the ones drover's log lacks are returned.
func streamOrder(want, got, stderr []string) (w, g, missing []string) {
	if len(stderr) == 0 {
		return want, got, nil
	}
	w, g = slices.Clone(want), slices.Clone(got)
	for _, l := range stderr {
		if i := slices.Index(w, l); i >= 0 {
			w = slices.Delete(w, i, i+1)
		}
		if i := slices.Index(g, l); i >= 0 {
			g = slices.Delete(g, i, i+1)
		} else {
			missing = append(missing, l)
		}
	}
	return w, g, missing
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
	// The rules first, then the stderr lines (as the rules leave them)
	// come out of both.
	wt, gt, missing := streamOrder(applyRules(want.Trace), applyRules(got.Trace), applyRules(want.Stderr))
	for _, l := range missing {
		d = append(d, fmt.Sprintf("stderr: GitLab Runner's %q is not in drover's log", l))
	}
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
