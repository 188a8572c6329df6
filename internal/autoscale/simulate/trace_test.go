package simulate_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/autoscale/simulate"
)

func TestReadTrace(t *testing.T) {
	in := "arrival_s,duration_s,tags\n# comment\n\n5, 1.5\n1.25,60,\"docker,linux\"\n3,2,gpu;large\n"
	got, err := simulate.ReadTrace(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatalf("ReadTrace = %v", err)
	}
	want := []simulate.Job{
		{Arrival: 1250 * time.Millisecond, Duration: time.Minute, Tags: []string{"docker", "linux"}},
		{Arrival: 3 * time.Second, Duration: 2 * time.Second, Tags: []string{"gpu", "large"}},
		{Arrival: 5 * time.Second, Duration: 1500 * time.Millisecond},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadTrace mismatch (-want +got):\n%s", d)
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0,1\nx,1\n", "t.csv:2: arrival_s: \"x\" is not a number"},
		{"arrival_s,duration_s\n0,1\n1,-2\n", "t.csv:3: duration_s: -2: want seconds between 0"},
		{"0,1\n1\n", "t.csv:2: want arrival_s,duration_s[,tags], got 1 fields"},
		{"0,1,a,b\n", "t.csv:1: want arrival_s,duration_s[,tags], got 4 fields"},
		{"0,NaN\n", "t.csv:1: duration_s"},
		{"1e300,1\n", "t.csv:1: arrival_s"},
		{"0,1\n2,\"3\n", "t.csv:2:"},
	} {
		_, err := simulate.ReadTrace(strings.NewReader(tc.in), "t.csv")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadTrace(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestWriteReadTraceRoundTrip(t *testing.T) {
	jobs := dayTrace(t, 500)
	var b bytes.Buffer
	if err := simulate.WriteTrace(&b, jobs); err != nil {
		t.Fatal(err)
	}
	back, err := simulate.ReadTrace(&b, "rt.csv")
	if err != nil {
		t.Fatalf("ReadTrace(WriteTrace) = %v", err)
	}
	if d := cmp.Diff(jobs, back); d != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", d)
	}
}

func FuzzReadTrace(f *testing.F) {
	for _, s := range []string{"arrival_s,duration_s\n0,1\n", "1.5,2,docker\n", "x\n", "0,1,\"a,b\"\n", "\"", "1e9,1e9\n", "-0,0\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		jobs, err := simulate.ReadTrace(strings.NewReader(s), "f.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.csv") && !strings.HasPrefix(err.Error(), "read trace f.csv") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		for i, j := range jobs {
			if j.Arrival < 0 || j.Duration < 0 {
				t.Fatalf("job %d has negative times: %+v", i, j)
			}
			if i > 0 && jobs[i-1].Arrival > j.Arrival {
				t.Fatalf("jobs not sorted at %d", i)
			}
		}
	})
}
