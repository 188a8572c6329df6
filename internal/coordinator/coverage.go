package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"strconv"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/web"
)

// Test coverage (coverage:). When a pipeline's job with a coverage regex
// ends (success or failed), its log is read line by line and the regex is
// tried on each line, as GitLab does (lib/gitlab/ci/trace/stream.rb,
// extract_coverage):
//
//   - on a line, the last match counts: its last capture group that is not
//     empty when the regex has groups, else the whole match;
//   - the value is the first number (\d+(\.\d+)?) in that text, and a line
//     whose text has none does not count;
//   - the last line that counts wins; none: no coverage.
//
// Two differences, both in the user's favour. The regex sees a line's
// text (web.PlainText): GitLab strips only the runner's timestamps, drover
// also colours, section markers and carriage returns, so that ^ and $
// work on coloured output. And where GitLab takes a match's last group
// even when it took no part in the match (and then finds no coverage at
// all), drover takes the last group that holds text. The value is kept as
// GitLab shows it: rounded to two decimals, without trailing zeros
// ("78.46", "100").

const (
	// maxCoverageLine is the longest line the regex is tried on; a longer
	// line is cut into pieces of this size, each tried as a line. It
	// bounds the memory of reading a log of any size.
	maxCoverageLine = 64 << 10
	// coverageCtxLines is how many lines are read between two looks at
	// the context (the log may be a file, whose reads do not see it).
	coverageCtxLines = 4096
)

// coverageNumberRE is the number GitLab takes from a match.
var coverageNumberRE = regexp.MustCompile(`\d+(\.\d+)?`)

// extractCoverage reads log to its end and returns the coverage regex re
// finds in it, "" for none.
func extractCoverage(ctx context.Context, log io.Reader, re *regexp.Regexp) (string, error) {
	br := bufio.NewReaderSize(log, maxCoverageLine)
	var plain []byte
	found, have := 0.0, false
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return "", fmt.Errorf("read the log: %w", err)
		}
		if len(line) > 0 {
			plain = web.PlainText(plain[:0], bytes.TrimSuffix(line, []byte("\n")))
			if v, ok := lineCoverage(re, plain); ok {
				found, have = v, true
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if n%coverageCtxLines == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
	}
	if !have {
		return "", nil
	}
	return formatCoverage(found), nil
}

// lineCoverage is the coverage one line of text gives, if it counts.
func lineCoverage(re *regexp.Regexp, line []byte) (float64, bool) {
	ms := re.FindAllSubmatchIndex(line, -1)
	if len(ms) == 0 {
		return 0, false
	}
	m := ms[len(ms)-1]
	text := line[m[0]:m[1]]
	if re.NumSubexp() > 0 {
		text = nil
		for g := len(m)/2 - 1; g >= 1; g-- {
			if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
				text = line[m[2*g]:m[2*g+1]]
				break
			}
		}
	}
	num := coverageNumberRE.Find(text)
	if num == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, false // more digits than a float holds: not a percentage
	}
	return v, true
}

// formatCoverage writes a coverage as GitLab shows it: rounded to two
// decimals, without trailing zeros.
func formatCoverage(v float64) string {
	if r := math.Round(v*100) / 100; !math.IsInf(r, 0) {
		v = r
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// jobCoverage is the coverage of job j's log, if it is a pipeline's job
// with a coverage regex ("" otherwise, or for none). The caller holds
// the job's lock, so the log does not change meanwhile. A failure to
// read it is logged and gives no coverage: it must not keep the job
// from ending.
func (c *Coordinator) jobCoverage(ctx context.Context, log *slog.Logger, j *store.Job) string {
	pj := j.Spec.Pipeline
	if pj == nil || pj.Coverage == "" {
		return ""
	}
	re, err := regexp.Compile(pj.Coverage)
	if err != nil {
		// The pipeline compiler checks the regex: this should not happen.
		log.Warn("coverage: bad regex, no coverage", "regex", pj.Coverage, "err", err)
		return ""
	}
	rc, err := c.traces.Open(ctx, j.ID, 0)
	if err != nil {
		log.Warn("coverage: open the log, no coverage", "err", err)
		return ""
	}
	defer rc.Close()
	cov, err := extractCoverage(ctx, rc, re)
	if err != nil {
		log.Warn("coverage: no coverage", "err", err)
		return ""
	}
	return cov
}

// pipelineCoverage is a pipeline's coverage, GitLab's: the average of its
// jobs' (those that have one; jobs are the effective ones, without the
// retried), "" when none has one.
func pipelineCoverage(jobs []store.Job) string {
	sum, n := 0.0, 0
	for _, j := range jobs {
		if j.Coverage == "" {
			continue
		}
		if v, err := strconv.ParseFloat(j.Coverage, 64); err == nil {
			sum += v
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return formatCoverage(sum / float64(n))
}
