package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/web"
)

// The web UI's runners page reads the store's runners and managers, and
// pauses and deletes runners as the admin API would: a pause is read by
// the runner's next job request (one already waiting in a long poll may
// still get a job), a delete goes through runnerapi.Runners so that the
// coordinator forgets the runner's managers.

var (
	_ web.Runners       = webSource{}
	_ web.ManagerFleets = webSource{}
)

// maxRunnerJobs bounds the jobs the runners page lists (those held by
// runners: waiting for their accept, running or canceling).
const maxRunnerJobs = 1000

func (s webSource) ListRunners(ctx context.Context) ([]web.Runner, error) {
	rs, err := s.c.st.ListRunners(ctx)
	if err != nil {
		return nil, fmt.Errorf("list runners: %w", err)
	}
	jobs, err := s.c.st.ListJobs(ctx, store.JobFilter{
		Statuses: []store.Status{store.StatusWaitingForRunnerAck, store.StatusRunning, store.StatusCanceling},
		Limit:    maxRunnerJobs,
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs of runners: %w", err)
	}
	held := map[int64][]web.RunnerJob{}
	for i := range jobs {
		j := &jobs[i]
		held[j.RunnerID] = append(held[j.RunnerID], web.RunnerJob{
			ID: j.ID, Name: j.Name, Project: j.Project, Status: string(j.Status),
			SystemID: j.RunnerSystemID, StartedAt: j.StartedAt,
		})
	}
	out := make([]web.Runner, 0, len(rs))
	for i := range rs {
		rn := &rs[i]
		ms, err := s.c.st.ListRunnerManagers(ctx, rn.ID)
		if err != nil {
			return nil, fmt.Errorf("list managers of runner %d: %w", rn.ID, err)
		}
		v := web.Runner{
			ID: rn.ID, Description: rn.Description, Tags: rn.Tags, RunUntagged: rn.RunUntagged,
			Locked: rn.Locked, Paused: rn.Paused, MaximumTimeout: time.Duration(rn.MaximumTimeout) * time.Second,
			CreatedAt: rn.CreatedAt, ContactedAt: rn.ContactedAt, Jobs: held[rn.ID],
		}
		for _, m := range ms {
			v.Managers = append(v.Managers, web.RunnerManager{
				SystemID: m.SystemID, ContactedAt: m.ContactedAt, Version: m.Version,
				Executor: m.Executor, Platform: m.Platform, Arch: m.Arch, FleetURL: m.FleetURL,
			})
		}
		out = append(out, v)
	}
	return out, nil
}

func (s webSource) SetRunnerPaused(ctx context.Context, id int64, paused bool) error {
	err := s.c.st.SetRunnerPaused(ctx, id, paused)
	if errors.Is(err, store.ErrNotFound) {
		return web.ErrRunnerNotFound
	}
	if err != nil {
		return fmt.Errorf("pause runner %d: %w", id, err)
	}
	// The runners online, and with them the stuck reasons of jobs, are
	// read anew.
	s.c.online.invalidate()
	return nil
}

func (s webSource) DeleteRunner(ctx context.Context, id int64) error {
	err := s.c.runners.DeleteRunner(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return web.ErrRunnerNotFound
	}
	if err != nil {
		return fmt.Errorf("delete runner %d: %w", id, err)
	}
	return nil
}

// ManagerFleet gives the runners page what signs in to a manager's fleet
// page: the URL it reported and its runner's token hash, which keys the
// tickets (the coordinator never has the token itself).
func (s webSource) ManagerFleet(ctx context.Context, runnerID int64, systemID string) (string, string, error) {
	rn, err := s.c.st.GetRunner(ctx, runnerID)
	if errors.Is(err, store.ErrNotFound) {
		return "", "", web.ErrRunnerNotFound
	}
	if err != nil {
		return "", "", fmt.Errorf("get runner %d: %w", runnerID, err)
	}
	ms, err := s.c.st.ListRunnerManagers(ctx, runnerID)
	if err != nil {
		return "", "", fmt.Errorf("list managers of runner %d: %w", runnerID, err)
	}
	for _, m := range ms {
		if m.SystemID == systemID {
			return m.FleetURL, rn.TokenHash, nil
		}
	}
	return "", "", web.ErrRunnerNotFound
}
