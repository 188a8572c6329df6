package runnerpool

import (
	"cmp"
	"slices"

	"github.com/drover-ci/drover/internal/autoscale"
)

// FleetRunners returns every pool's status, by runner name, for the
// runner manager's fleet page (cmd/drover hands the Set to the page as its
// web.Fleet).
func (s *Set) FleetRunners() []autoscale.RunnerStatus {
	s.mu.Lock()
	rps := make([]*runnerPool, 0, len(s.pools))
	for _, rp := range s.pools {
		rps = append(rps, rp)
	}
	s.mu.Unlock()
	out := make([]autoscale.RunnerStatus, 0, len(rps))
	for _, rp := range rps {
		out = append(out, autoscale.RunnerStatus{
			Name: rp.spec.Name, ShortToken: rp.spec.ShortToken, Plugin: rp.spec.Plugin, Status: rp.pool.Status(),
		})
	}
	slices.SortFunc(out, func(a, b autoscale.RunnerStatus) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ShortToken, b.ShortToken))
	})
	return out
}

// FleetTrace returns the jobs the pool of the runner with short token
// shortToken served in the last day (autoscale.Pool.JobTrace), for the
// fleet page's what-if.
func (s *Set) FleetTrace(shortToken string) (autoscale.JobTrace, bool) {
	s.mu.Lock()
	rp := s.pools[shortToken]
	s.mu.Unlock()
	if rp == nil {
		return autoscale.JobTrace{}, false
	}
	return rp.pool.JobTrace(), true
}
