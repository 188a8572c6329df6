package jobstore_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/jobstore/storetest"
)

// benchStore measures the write cost per job: a Save of a ~4 KiB record
// (what a stage transition writes) and a Heartbeat (what every
// health_interval writes), each on its own job so both paths are timed
// as in steady state.
func benchStore(b *testing.B, s jobstore.Store) {
	ctx := b.Context()
	const jobs = 64
	recs := make([]*jobstore.Record, jobs)
	for i := range recs {
		recs[i] = storetest.Record(int64(i+1), "bench", 4096)
		if err := s.Save(ctx, recs[i]); err != nil {
			b.Fatal(err)
		}
	}
	size, _ := recs[0].Job.MarshalJSON()
	b.Run("Save", func(b *testing.B) {
		b.SetBytes(int64(len(size)))
		i := 0
		for b.Loop() {
			r := recs[i%jobs]
			r.TraceOffset++
			if err := s.Save(ctx, r); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Heartbeat", func(b *testing.B) {
		i := 0
		now := time.Now()
		for b.Loop() {
			if err := s.Heartbeat(ctx, int64(i%jobs+1), "bench", now); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func BenchmarkFileSave(b *testing.B) {
	s, err := jobstore.Open(b.Context(), fileConfig(filepath.Join(b.TempDir(), "store")), jobstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchStore(b, s)
}

func BenchmarkRedisSave(b *testing.B) {
	srv := storetest.StartRedis(b)
	s, err := jobstore.Open(b.Context(), redisConfig(srv, "bench:"), jobstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchStore(b, s)
}
