package simulate

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is one line of a trace: when it arrives (from the start of the
// trace), how long it runs once it has an instance slot, and its tags.
type Job struct {
	Arrival  time.Duration
	Duration time.Duration
	Tags     []string
}

// maxTraceSeconds bounds arrival_s and duration_s (a year), so every
// value fits a time.Duration.
const maxTraceSeconds = 365 * 24 * 3600

// ReadTrace parses a trace in CSV: `arrival_s,duration_s[,tags]` per line,
// seconds as decimal numbers, tags separated by spaces, commas (quoted) or
// semicolons. A first line whose arrival_s is not a number is a header;
// blank lines and lines starting with # are skipped. Errors name the file
// (name) and line. Jobs are returned sorted by arrival (stable).
func ReadTrace(r io.Reader, name string) ([]Job, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	var jobs []Job
	first := true
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("%s:%d: %w", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("read trace %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if first {
			first = false
			if _, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64); err != nil {
				continue // header
			}
		}
		if len(rec) < 2 || len(rec) > 3 {
			return nil, fmt.Errorf("%s:%d: want arrival_s,duration_s[,tags], got %d fields", name, line, len(rec))
		}
		arr, err := seconds(rec[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: arrival_s: %w", name, line, err)
		}
		dur, err := seconds(rec[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: duration_s: %w", name, line, err)
		}
		j := Job{Arrival: arr, Duration: dur}
		if len(rec) == 3 {
			j.Tags = strings.FieldsFunc(rec[2], func(r rune) bool { return r == ' ' || r == ',' || r == ';' || r == '\t' })
		}
		jobs = append(jobs, j)
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return jobs, nil
}

func seconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of seconds", s)
	}
	if math.IsNaN(f) || f < 0 || f > maxTraceSeconds {
		return 0, fmt.Errorf("%s: want seconds between 0 and %d", s, maxTraceSeconds)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// WriteTrace writes jobs in the format ReadTrace reads, with a header and
// millisecond precision.
func WriteTrace(w io.Writer, jobs []Job) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "arrival_s,duration_s,tags")
	for _, j := range jobs {
		fmt.Fprintf(bw, "%.3f,%.3f", j.Arrival.Seconds(), j.Duration.Seconds())
		if len(j.Tags) > 0 {
			fmt.Fprintf(bw, ",%s", strings.Join(j.Tags, ";"))
		}
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}
