package difftest

import (
	"os"
	"regexp"
	"strings"
)

// normaliser makes a job log comparable across runs and runners: what
// changes from run to run (times, tokens, the run's directory, the
// coordinator's port, the host's name) is replaced by a name for it.
type normaliser struct {
	root, serverURL string
	// runnerToken is the runner's token: its short form names the
	// runner in the log and in the builds directory's path.
	runnerToken string
}

var (
	// lineStamp is GitLab Runner 19's per-line prefix: an RFC 3339 time,
	// the stream number, O or E, then ' ' for a new line or '+' for the
	// continuation of the last one.
	lineStamp   = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z \d\d([OE])([ +])`)
	sectionTime = regexp.MustCompile(`section_(start|end):\d+:`)
	jobToken    = regexp.MustCompile(`\b(glcbt|glcbt-[0-9a-z]+|gldjt|drjt)-[A-Za-z0-9_-]{8,}`)
	runnerToken = regexp.MustCompile(`\bglrt-[A-Za-z0-9_-]{8,}`)
	// correlationID is the request id of the runner's jobs/request, new
	// on every request, that GitLab Runner prints and sends to Gitaly.
	correlationID = regexp.MustCompile(`(Gitaly correlation ID: )[0-9A-Za-z-]+`)
	// imageID is an image's id: the docker executor's images are built
	// on the machine from its own files, so each machine has others.
	imageID = regexp.MustCompile(`\bsha256:[0-9a-f]{64}\b`)
	// helperTag is the tag of GitLab Runner's helper image as the suite
	// builds it (dockerimage.GitLabHelper): a digest of the helper binary
	// and this host's tools, so each build and machine has its own.
	helperTag = regexp.MustCompile(`\b(drover-difftest-gitlab-runner-helper:)[0-9a-f]{12}\b`)
)

// trace returns the normalised lines of a job log, and those of them
// that a stamped log (GitLab Runner's) says came from a stderr stream.
func (n normaliser) trace(s string, jobID int64) (lines, stderr []string) {
	var isErr []bool
	for l := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
		e := false
		if m := lineStamp.FindStringSubmatch(l); m != nil {
			l = l[len(m[0]):]
			if m[2] == "+" && len(lines) > 0 {
				lines[len(lines)-1] += l
				continue
			}
			e = m[1] == "E"
		}
		lines = append(lines, l)
		isErr = append(isErr, e)
	}
	host, _ := os.Hostname()
	for i, l := range lines {
		l = sectionTime.ReplaceAllString(l, "section_${1}:T:")
		l = jobToken.ReplaceAllString(l, "$$JOB_TOKEN")
		l = runnerToken.ReplaceAllString(l, "$$RUNNER_TOKEN")
		l = correlationID.ReplaceAllString(l, "${1}$$CORRELATION_ID")
		l = imageID.ReplaceAllString(l, "$$IMAGE_ID")
		l = helperTag.ReplaceAllString(l, "${1}$$HELPER_TAG")
		if t := n.runnerToken; len(t) > 14 {
			// GitLab Runner's short token is 9 characters after glrt-
			// (8 in older versions).
			l = strings.ReplaceAll(l, t[5:14], "$SHORT_TOKEN")
			// ... as a host name has it (the docker executor's
			// containers).
			l = strings.ReplaceAll(l, hostSafe(t[5:14]), "$SHORT_TOKEN")
			l = strings.ReplaceAll(l, t[5:13], "$SHORT_TOKEN")
		}
		if n.root != "" {
			l = strings.ReplaceAll(l, n.root, "$ROOT")
		}
		if n.serverURL != "" {
			l = strings.ReplaceAll(l, n.serverURL, "$SERVER_URL")
		}
		if host != "" {
			l = strings.ReplaceAll(l, host, "$HOST")
		}
		lines[i] = strings.TrimRight(l, "\r")
		if isErr[i] {
			stderr = append(stderr, lines[i])
		}
	}
	return lines, stderr
}

// hostSafe is s as a host name has it (RFC 1123): lower case, without
// the characters a host name may not have.
func hostSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return -1
	}, s)
}
