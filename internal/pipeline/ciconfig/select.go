package ciconfig

import (
	"fmt"
	"slices"
)

// Select returns the jobs a local run of names runs, in pipeline order: each
// name is a job or the base name of parallel jobs (all of them); with
// withNeeds, also what they need, transitively (a job without needs: needs
// every job of the earlier stages). A name the pipeline does not have is
// an error naming it.
func (p *Pipeline) Select(names []string, withNeeds bool) ([]*Job, error) {
	chosen := map[string]bool{}
	var queue []*Job
	for _, n := range names {
		found := false
		for _, j := range p.Jobs {
			if j.Name == n || j.Base == n {
				found = true
				if !chosen[j.Name] {
					chosen[j.Name] = true
					queue = append(queue, j)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("job %q is not in the pipeline (its rules may leave it out)", n)
		}
	}
	stageIdx := map[string]int{}
	for i, s := range p.Stages {
		stageIdx[s] = i
	}
	for withNeeds && len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		var deps []*Job
		if j.HasNeeds {
			for _, n := range j.Needs {
				if t := p.Job(n.Job); t != nil {
					deps = append(deps, t)
				}
			}
		} else {
			for _, t := range p.Jobs {
				if stageIdx[t.Stage] < stageIdx[j.Stage] {
					deps = append(deps, t)
				}
			}
		}
		for _, t := range deps {
			if !chosen[t.Name] {
				chosen[t.Name] = true
				queue = append(queue, t)
			}
		}
	}
	var out []*Job
	for _, j := range p.Jobs {
		if chosen[j.Name] {
			out = append(out, j)
		}
	}
	return slices.Clip(out), nil
}
