package router

import (
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/store"
)

// mgrSeen is what the router last saw of a downstream runner manager.
type mgrSeen struct {
	runner   store.Runner
	features api.FeaturesInfo
	lastSeen time.Time
}

// health is the placement record of one runner manager (system_id).
type health struct {
	bad      time.Time // last decline or silent expiry
	declines int
	expiries int
}

// unhealthyLocked reports whether sys declined or went silent within
// healthWindow without accepting a job since.
func (r *Router) unhealthyLocked(sys string, now time.Time) bool {
	h := r.health[sys]
	return h != nil && !h.bad.IsZero() && now.Sub(h.bad) < healthWindow
}

func (r *Router) markBadLocked(sys string, now time.Time, expired bool) {
	h := r.health[sys]
	if h == nil {
		h = &health{}
		r.health[sys] = h
	}
	h.bad = now
	if expired {
		h.expiries++
	} else {
		h.declines++
	}
}

func (r *Router) markGoodLocked(sys string) {
	if h := r.health[sys]; h != nil {
		h.bad = time.Time{}
	}
}

// canRun is the matching rule of the coordinator: the job's tags are a
// subset of the runner's; untagged jobs only go to run_untagged runners;
// jobs with an image (or services) only to runners whose executor
// announces that feature. Jobs whose tags are unknown (see the package
// doc) match on features only.
func canRun(rn *store.Runner, f *api.FeaturesInfo, j *job) bool {
	if rn.Paused {
		return false
	}
	if j.tagsKnown {
		if len(j.tags) == 0 {
			if !rn.RunUntagged {
				return false
			}
		} else {
			for _, t := range j.tags {
				if !slices.Contains(rn.Tags, t) {
					return false
				}
			}
		}
	}
	if j.image && !f.Image {
		return false
	}
	if j.services && !f.Services {
		return false
	}
	return true
}

// parseTags splits a comma-separated tag list.
func parseTags(s string) []string {
	out := []string{}
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// unionFeatures sets in dst every feature set in src.
func unionFeatures(dst *api.FeaturesInfo, src *api.FeaturesInfo) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		if f := d.Field(i); f.Kind() == reflect.Bool && s.Field(i).Bool() {
			f.SetBool(true)
		}
	}
}
