package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/cron"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Pipeline schedules (GitLab's): a schedule of a registered project runs
// a pipeline (CI_PIPELINE_SOURCE=schedule) for its ref at the times its
// 5-field cron expression gives in its IANA time zone, with its own
// variables as the pipeline's.
//
// Every coordinator looks for due schedules on each pass of its reaper
// loop (Run, every ReapInterval: a schedule runs up to that late). A run is claimed by moving the schedule's next run
// on with a compare-and-set of its version (store.ClaimScheduleRun): of
// several coordinators on one database exactly one creates the pipeline.
// The next run is the first after now, so runs missed while no
// coordinator was up are made up by one pipeline, not one per missed
// time, as GitLab does.

// scheduleVariablesPurpose is the purpose schedule variables are sealed
// for.
const scheduleVariablesPurpose = "drover schedule variables"

// parseSchedule checks a cron expression and a time zone ("" = UTC).
func parseSchedule(expr, tz string) (*cron.Expr, *time.Location, *runnerapi.BadRequest) {
	e, err := cron.Parse(expr)
	if err != nil {
		return nil, nil, runnerapi.Invalid("cron", "%v", err)
	}
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return nil, nil, runnerapi.Invalid("cron_timezone", "cron_timezone must be an IANA time zone name (UTC, Europe/Berlin), not Local")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, nil, runnerapi.Invalid("cron_timezone", "cron_timezone %q is not an IANA time zone name (UTC, Europe/Berlin)", tz)
	}
	return e, loc, nil
}

// nextScheduleRun is the first time after now that schedule s is due, or
// the zero time when it is inactive or never due.
func nextScheduleRun(s *store.Schedule, now time.Time) (time.Time, error) {
	if !s.Active {
		return time.Time{}, nil
	}
	e, loc, bad := parseSchedule(s.Cron, s.CronTimezone)
	if bad != nil {
		return time.Time{}, bad
	}
	return e.Next(now, loc).UTC(), nil
}

// scheduleView is a schedule as the admin API shows it.
type scheduleView struct {
	ID             int64          `json:"id"`
	Project        string         `json:"project"`
	Description    string         `json:"description"`
	Ref            string         `json:"ref"`
	Cron           string         `json:"cron"`
	CronTimezone   string         `json:"cron_timezone"`
	Variables      []variableView `json:"variables"`
	Active         bool           `json:"active"`
	NextRunAt      *string        `json:"next_run_at,omitempty"`
	LastPipelineID int64          `json:"last_pipeline_id,omitempty"`
	Owner          string         `json:"owner,omitempty"`
	CreatedAt      *string        `json:"created_at,omitempty"`
	UpdatedAt      *string        `json:"updated_at,omitempty"`
	Version        int64          `json:"version"`
}

func (c *Coordinator) scheduleView(s *store.Schedule) (scheduleView, error) {
	vs, err := c.projectVariables(s.SealedVariables, scheduleVariablesPurpose)
	if err != nil {
		return scheduleView{}, fmt.Errorf("schedule %d: %w", s.ID, err)
	}
	return scheduleView{
		ID: s.ID, Project: s.Project, Description: s.Description, Ref: s.Ref, Cron: s.Cron, CronTimezone: s.CronTimezone,
		Variables: variableViews(vs), Active: s.Active, NextRunAt: timeString(s.NextRunAt), LastPipelineID: s.LastPipelineID,
		Owner: s.Owner, CreatedAt: timeString(s.CreatedAt), UpdatedAt: timeString(s.UpdatedAt), Version: s.Version,
	}, nil
}

// scheduleRequest is the body of POST .../schedules (Cron required) and
// PATCH .../schedules/{id}; nil fields are left as they are (or take
// their defaults: ref the project's default branch, cron_timezone UTC,
// active true).
type scheduleRequest struct {
	Description  *string            `json:"description"`
	Ref          *string            `json:"ref"`
	Cron         *string            `json:"cron"`
	CronTimezone *string            `json:"cron_timezone"`
	Variables    *[]ProjectVariable `json:"variables"`
	Active       *bool              `json:"active"`
	Owner        *string            `json:"owner"`
	Version      int64              `json:"version"`
}

// applySchedule validates req and applies it to s, and sets s's next run
// (from now).
func (c *Coordinator) applySchedule(req *scheduleRequest, s *store.Schedule, now time.Time) *runnerapi.BadRequest {
	if req.Description != nil {
		if len(*req.Description) > 255 || runnerapi.HasControl(*req.Description) {
			return runnerapi.Invalid("description", "description must be at most 255 printable characters")
		}
		s.Description = *req.Description
	}
	if req.Ref != nil {
		s.Ref = strings.TrimPrefix(*req.Ref, "refs/heads/")
	}
	if !validRef(s.Ref) {
		return runnerapi.Invalid("ref", "ref must be a branch or tag name")
	}
	if req.Cron != nil {
		s.Cron = strings.Join(strings.Fields(*req.Cron), " ")
	}
	if req.CronTimezone != nil {
		s.CronTimezone = *req.CronTimezone
	}
	if s.CronTimezone == "" {
		s.CronTimezone = "UTC"
	}
	if s.Cron == "" {
		return runnerapi.Invalid("cron", "cron is required: 5 fields, minute hour day-of-month month day-of-week")
	}
	e, loc, bad := parseSchedule(s.Cron, s.CronTimezone)
	if bad != nil {
		return bad
	}
	if e.Next(now, loc).IsZero() {
		return runnerapi.Invalid("cron", "cron %q never matches", s.Cron)
	}
	if req.Variables != nil {
		for i, v := range *req.Variables {
			if v.Protected {
				return runnerapi.Invalid(fmt.Sprintf("variables[%d].protected", i), "a schedule's variables are not protected: they are its ref's pipeline's")
			}
		}
		if e := validVariables("variables", *req.Variables); e != nil {
			return e
		}
		s.SealedVariables = c.sealVariablesList(*req.Variables, scheduleVariablesPurpose)
	}
	if req.Active != nil {
		s.Active = *req.Active
	}
	if req.Owner != nil {
		if len(*req.Owner) > 255 || runnerapi.HasControl(*req.Owner) {
			return runnerapi.Invalid("owner", "owner must be at most 255 printable characters")
		}
		s.Owner = *req.Owner
	}
	s.NextRunAt = time.Time{}
	if s.Active {
		s.NextRunAt = e.Next(now, loc).UTC()
	}
	return nil
}

// handleCreateSchedule is POST /api/v1/projects/{project}/schedules.
func (c *Coordinator) handleCreateSchedule(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	var req scheduleRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	now := c.clock.Now()
	s := store.Schedule{Project: p.Name, Ref: p.DefaultBranch, Active: true, Owner: "admin", CreatedAt: now}
	if s.Ref == "" {
		s.Ref = defaultBranch
	}
	if e := c.applySchedule(&req, &s, now); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	s, err := c.st.CreateSchedule(r.Context(), s)
	if errors.Is(err, store.ErrNotFound) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", p.Name), "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "create schedule", err)
		return
	}
	c.log.Info("schedule created", "project", s.Project, "schedule_id", s.ID, "cron", s.Cron, "tz", s.CronTimezone, "next_run_at", s.NextRunAt)
	c.writeSchedule(w, r, http.StatusCreated, &s)
}

func (c *Coordinator) writeSchedule(w http.ResponseWriter, r *http.Request, code int, s *store.Schedule) {
	v, err := c.scheduleView(s)
	if err != nil {
		c.internalError(r.Context(), w, "schedule view", err)
		return
	}
	runnerapi.WriteJSON(w, code, v)
}

// handleListSchedules is GET /api/v1/projects/{project}/schedules.
func (c *Coordinator) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return
	}
	ss, err := c.st.ListSchedules(r.Context(), p.Name)
	if err != nil {
		c.internalError(r.Context(), w, "list schedules", err)
		return
	}
	out := make([]scheduleView, 0, len(ss))
	for i := range ss {
		v, err := c.scheduleView(&ss[i])
		if err != nil {
			c.internalError(r.Context(), w, "schedule view", err)
			return
		}
		out = append(out, v)
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

// loadSchedule reads the schedule {id} of the project {project}.
func (c *Coordinator) loadSchedule(w http.ResponseWriter, r *http.Request) (store.Schedule, bool) {
	p, ok := c.loadProject(w, r, true)
	if !ok {
		return store.Schedule{}, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		runnerapi.WriteError(w, http.StatusBadRequest, "schedule id must be a positive integer", "id")
		return store.Schedule{}, false
	}
	s, err := c.st.GetSchedule(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || err == nil && s.ProjectID != p.ID {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("schedule %d of project %s not found", id, p.Name), "")
		return s, false
	}
	if err != nil {
		c.internalError(r.Context(), w, "load schedule", err)
		return s, false
	}
	return s, true
}

// handleGetSchedule is GET /api/v1/projects/{project}/schedules/{id}.
func (c *Coordinator) handleGetSchedule(w http.ResponseWriter, r *http.Request) {
	if s, ok := c.loadSchedule(w, r); ok {
		c.writeSchedule(w, r, http.StatusOK, &s)
	}
}

// handleUpdateSchedule is PATCH /api/v1/projects/{project}/schedules/{id}:
// the fields given change, and the next run is computed again.
func (c *Coordinator) handleUpdateSchedule(w http.ResponseWriter, r *http.Request) {
	var req scheduleRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	for range 5 {
		s, ok := c.loadSchedule(w, r)
		if !ok {
			return
		}
		from := s.Version
		if req.Version != 0 {
			from = req.Version
		}
		now := c.clock.Now()
		if e := c.applySchedule(&req, &s, now); e != nil {
			runnerapi.WriteBad(w, e)
			return
		}
		s, err := c.st.UpdateSchedule(r.Context(), s, from, now)
		if errors.Is(err, store.ErrConflict) {
			if req.Version != 0 {
				runnerapi.WriteError(w, http.StatusConflict, fmt.Sprintf("schedule %d changed: it is at version %d, not %d", s.ID, s.Version, req.Version), "version")
				return
			}
			continue // a run claimed meanwhile: apply again
		}
		if errors.Is(err, store.ErrNotFound) {
			runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("schedule %s not found", r.PathValue("id")), "")
			return
		}
		if err != nil {
			c.internalError(r.Context(), w, "update schedule", err)
			return
		}
		c.writeSchedule(w, r, http.StatusOK, &s)
		return
	}
	runnerapi.WriteError(w, http.StatusConflict, "the schedule keeps changing: try again", "")
}

// handleDeleteSchedule is DELETE /api/v1/projects/{project}/schedules/{id}.
func (c *Coordinator) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	s, ok := c.loadSchedule(w, r)
	if !ok {
		return
	}
	if err := c.st.DeleteSchedule(r.Context(), s.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.internalError(r.Context(), w, "delete schedule", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handlePlaySchedule is POST /api/v1/projects/{project}/schedules/{id}/play:
// the schedule's pipeline, now (its next run stays as it is). 201 with
// the pipeline; the errors of POST /api/v1/pipelines.
func (c *Coordinator) handlePlaySchedule(w http.ResponseWriter, r *http.Request) {
	s, ok := c.loadSchedule(w, r)
	if !ok {
		return
	}
	p, err := c.runSchedule(r.Context(), &s)
	c.writeCreatedPipeline(w, r, p, err, "play schedule")
}

// runSchedule creates schedule s's pipeline and records it as the
// schedule's last.
func (c *Coordinator) runSchedule(ctx context.Context, s *store.Schedule) (store.Pipeline, error) {
	vs, err := c.projectVariables(s.SealedVariables, scheduleVariablesPurpose)
	if err != nil {
		return store.Pipeline{}, fmt.Errorf("schedule %d variables: %w", s.ID, err)
	}
	// A configuration that does not compile is a failed pipeline, as for
	// a push: the schedule ran, and its page says why nothing did.
	req := createPipelineRequest{Project: s.Project, Ref: s.Ref, Source: "schedule", RecordErrors: true,
		TriggeredBy: oneLine(fmt.Sprintf("schedule %d (%s)", s.ID, cmp.Or(s.Description, s.Cron)), 255)}
	for _, v := range vs {
		req.Variables = append(req.Variables, v.apiVariable())
	}
	p, err := c.createPipeline(ctx, req)
	if err != nil {
		return p, err
	}
	if err := c.st.SetScheduleLastPipeline(ctx, s.ID, p.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.Warn("schedule: record its last pipeline", "schedule_id", s.ID, "pipeline_id", p.ID, "err", err)
	}
	return p, nil
}

// runDueSchedules claims and runs every schedule due now. Each run is
// claimed first (its next run moved on), so a pipeline that cannot be
// created (a ref gone, a configuration with errors) is not tried again
// until the next time.
func (c *Coordinator) runDueSchedules(ctx context.Context) {
	now := c.clock.Now()
	due, err := c.st.DueSchedules(ctx, now, 100)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("scheduler: due schedules", "err", err)
		}
		return
	}
	for i := range due {
		s := &due[i]
		log := c.log.With("schedule_id", s.ID, "project", s.Project, "ref", s.Ref)
		next, err := nextScheduleRun(s, now)
		if err != nil {
			// Checked when it was written: a zone the time zone database
			// no longer has. The schedule waits for an edit.
			log.Error("scheduler: schedule cannot be computed; it stays idle until it is changed", "cron", s.Cron, "tz", s.CronTimezone, "err", err)
		}
		claimed, err := c.st.ClaimScheduleRun(ctx, s.ID, s.Version, next, now)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			continue // another coordinator's, or changed or deleted meanwhile
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Error("scheduler: claim run", "err", err)
			}
			continue
		}
		p, err := c.runSchedule(ctx, &claimed)
		if err != nil {
			log.Warn("scheduler: pipeline not created", "err", err, "next_run_at", next)
			continue
		}
		log.Info("scheduled pipeline created", "pipeline_id", p.ID, "due", s.NextRunAt, "next_run_at", next)
	}
}

// deliveryRetention is how long webhook deliveries are remembered for
// de-duplication.
const deliveryRetention = 7 * 24 * time.Hour

// expireDeliveries forgets the webhook deliveries older than
// deliveryRetention (the reaper's).
func (c *Coordinator) expireDeliveries(ctx context.Context, now time.Time) {
	n, err := c.st.ExpireDeliveries(ctx, now.Add(-deliveryRetention))
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("reaper: expire webhook deliveries", "err", err)
		}
		return
	}
	if n > 0 {
		c.log.Debug("webhook deliveries expired", "count", n)
	}
}
