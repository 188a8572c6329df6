package docker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
)

// Sweep removes, on the engine of every docker runner, the containers,
// networks and per-job volumes labelled with systemID and that runner's
// short token whose job keep does not claim (a job this manager, or
// another on the same job store, will resume). Builds and cache volumes
// stay. It returns what it removed.
//
// The runner's label matters: every manager on a machine has the same
// system ID (it comes from the machine ID, as GitLab Runner's does), so a
// second manager with a config of its own, starting while the first runs
// jobs on the same engine, must not take those jobs for leftovers.
func (p *Provider) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	if p.o.Configs == nil || systemID == "" {
		return nil, nil
	}
	type target struct {
		eng    Engine
		runner string
	}
	seen := map[target]bool{}
	var removed []string
	for _, c := range p.o.Configs() {
		eng, err := p.o.Dialer.Engine(c)
		if err != nil {
			return removed, err
		}
		if c.ShortToken == "" || seen[target{eng, c.ShortToken}] {
			continue
		}
		seen[target{eng, c.ShortToken}] = true
		r, err := sweepEngine(ctx, eng, keep, LabelSystemID+"="+systemID, LabelRunner+"="+c.ShortToken)
		removed = append(removed, r...)
		if err != nil {
			return removed, fmt.Errorf("docker host %s: %w", hostName(c), err)
		}
		r, err = p.sweepStandbys(ctx, eng, LabelSystemID+"="+systemID, LabelRunner+"="+c.ShortToken)
		removed = append(removed, r...)
		if err != nil {
			return removed, fmt.Errorf("docker host %s: %w", hostName(c), err)
		}
	}
	return removed, nil
}

// sweepEngine removes the job resources carrying label (k=v) whose job
// keep does not claim.
func sweepEngine(ctx context.Context, eng Engine, keep func(int64) bool, labels ...string) ([]string, error) {
	f := labelFilter(append([]string{LabelManaged + "=1", LabelJob}, labels...)...)
	orphan := func(l map[string]string) bool {
		id, err := strconv.ParseInt(l[LabelJob], 10, 64)
		return err == nil && !keep(id)
	}
	var removed []string
	cs, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var ids []string
	for _, c := range cs {
		if orphan(c.Labels) {
			ids = append(ids, c.ID)
			name := c.ID[:12]
			if len(c.Names) > 0 {
				name = c.Names[0]
			}
			removed = append(removed, fmt.Sprintf("container %s (job %s, %s)", name, c.Labels[LabelJob], c.Labels[LabelRole]))
		}
	}
	nets, err := eng.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return removed, fmt.Errorf("list networks: %w", err)
	}
	var netIDs []string
	for _, n := range nets {
		if orphan(n.Labels) {
			netIDs = append(netIDs, n.ID)
			removed = append(removed, fmt.Sprintf("network %s (job %s)", n.Name, n.Labels[LabelJob]))
		}
	}
	vols, err := eng.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return removed, fmt.Errorf("list volumes: %w", err)
	}
	var volNames []string
	for _, v := range vols.Volumes {
		if orphan(v.Labels) {
			volNames = append(volNames, v.Name)
			removed = append(removed, fmt.Sprintf("volume %s (job %s)", v.Name, v.Labels[LabelJob]))
		}
	}
	logger := discard()
	removeAll(ctx, eng, logger, ids, "", volNames[:0], true)
	for _, n := range netIDs {
		removeAll(ctx, eng, logger, nil, n, nil, true)
	}
	removeAll(ctx, eng, logger, nil, "", volNames, true)
	return removed, nil
}

// SweepEngine is Sweep on one engine (an autoscaled instance's, which
// the wrapping provider reaches only once its pool re-adopted it).
func SweepEngine(ctx context.Context, eng Engine, systemID string, keep func(jobID int64) bool) ([]string, error) {
	if systemID == "" {
		return nil, nil
	}
	return sweepEngine(ctx, eng, keep, LabelSystemID+"="+systemID)
}

// SweepJob removes what job jobID of the runner left on eng: the
// resources of an earlier attempt of a resumed job, made on an engine its
// last attempt did not use.
func SweepJob(ctx context.Context, eng Engine, shortToken string, jobID int64) ([]string, error) {
	return sweepEngine(ctx, eng, func(id int64) bool { return id != jobID }, LabelRunner+"="+shortToken)
}
