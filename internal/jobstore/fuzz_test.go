package jobstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

func sampleRecord() *Record {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	return &Record{
		JobID: 12, RunnerToken: "glrt-x", RunnerShort: "x", Owner: "m",
		Job: json.RawMessage(`{"id":12,"token":"t"}`), ExecutorState: json.RawMessage(`{"pid":1}`),
		Stage: "step_script", StageDone: true, TraceOffset: 77, Retries: 2, State: StateRunning,
		StartedAt: t0, UpdatedAt: t0, HealthAt: t0, Version: 3,
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the record decoders (the file
// store's and the Redis store's): they must never panic, must fail with
// ErrCorrupt only, and what they accept must survive a round trip.
func FuzzDecodeRecord(f *testing.F) {
	good, err := encodeRecord(sampleRecord())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "m", "3", "2026-03-04T05:06:07Z")
	f.Add(good[:len(good)/2], "", "", "")
	f.Add([]byte(`{"format":1,"job_id":1,"state":"running","job":[1,2,{"a":null}]}`), "m", "1", "x")
	f.Add([]byte(`{"format":2,"job_id":1,"state":"running"}`), "m", "-1", "")
	f.Add([]byte(`null`), "", "99999999999999999999", "")
	f.Add([]byte("\x00\xff"), "", "", "")
	f.Fuzz(func(t *testing.T, data []byte, owner, version, health string) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord error %v does not wrap ErrCorrupt", err)
			}
		} else {
			if r.JobID <= 0 || r.State == "" || r.Retries < 0 || r.TraceOffset < 0 {
				t.Fatalf("decodeRecord accepted an invalid record %+v", r)
			}
			again, err := encodeRecord(r)
			if err != nil {
				t.Fatalf("encodeRecord(decoded) = %v", err)
			}
			r2, err := decodeRecord(again)
			if err != nil {
				t.Fatalf("decodeRecord(encodeRecord(decoded)) = %v", err)
			}
			again2, _ := encodeRecord(r2)
			if !bytes.Equal(again, again2) {
				t.Fatalf("round trip not stable:\n%s\n%s", again, again2)
			}
		}
		h := map[string]string{"data": string(data), "owner": owner, "version": version, "retries": version,
			"state": "running", "health": health, "updated": health}
		if _, err := decodeHash(12, h); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeHash error %v does not wrap ErrCorrupt", err)
		}
	})
}

// FuzzParseConfig parses arbitrary config files and interprets every
// runner's [runners.store]: no panics, problems are *config.Error, and an
// accepted store config is usable.
func FuzzParseConfig(f *testing.F) {
	runner := "[[runners]]\nurl = \"https://x\"\ntoken = \"glrt-abc\"\nexecutor = \"shell\"\nenvironment = [\"A=b\"]\n"
	for _, store := range []string{
		"[runners.store]\nname = \"file\"\n[runners.store.file]\npath = \"/tmp/$CI_RUNNER_SHORT_TOKEN/$A\"\n",
		"[runners.store]\nname = \"redis\"\nhealth_interval = 1.5\nhealth_timeout = \"3s\"\n[runners.store.redis]\nurl = \"redis://h:1/2\"\nprefix = \"\"\n",
		"[runners.store]\nname = \"file\"\nmax_retries = 9223372036854775807\nstale_timeout = 1e300\n",
		"[runners.store]\nname = \"file\"\nfile = { path = \"${\" }\n",
		"[runners.store]\nredis = []\n",
		"store = 3\n",
	} {
		f.Add(runner + store)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, _, err := config.Parse("config.toml", []byte(src))
		if err != nil {
			return
		}
		for i := range c.Runners {
			sc, err := ParseConfig("config.toml", &c.Runners[i], map[string]string{"CI_RUNNER_TAGS": "a"})
			if err != nil {
				var ce *config.Error
				if !errors.As(err, &ce) || ce.File != "config.toml" || ce.Key == "" {
					t.Fatalf("ParseConfig error %#v is not a *config.Error with file and key", err)
				}
				continue
			}
			if sc == nil {
				if c.Runners[i].Store != nil {
					t.Fatalf("ParseConfig = nil, nil for a present store table")
				}
				continue
			}
			switch {
			case sc.Name == NameFile && sc.File.Path == "",
				sc.Name == NameRedis && sc.Redis.URL == "",
				sc.Name != NameFile && sc.Name != NameRedis,
				sc.HealthInterval <= 0, sc.CleanupInterval <= 0, sc.StaleTimeout <= 0,
				sc.HealthTimeout <= sc.HealthInterval, sc.MaxRetries < 0, sc.Redis.Prefix == "":
				t.Fatalf("ParseConfig accepted an unusable config %+v", sc)
			}
		}
	})
}
