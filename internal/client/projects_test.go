package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
)

func ptr[T any](v T) *T { return &v }

// TestProjectsAndSchedules drives a real coordinator through the client:
// project names with slashes travel URL-encoded.
func TestProjectsAndSchedules(t *testing.T) {
	ctx := t.Context()
	co, err := coordinator.New(ctx, nil, coordinator.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	srv := httptest.NewServer(co.Handler())
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, co.AdminToken(), nil)

	p, err := c.CreateProject(ctx, client.ProjectSpec{Name: ptr("group/sub/app"), RepoURL: ptr("https://example.com/app.git"),
		Variables: &[]client.ProjectVariable{{Key: "A", Value: "1"}}})
	if err != nil {
		t.Fatalf("CreateProject = %v", err)
	}
	if p.WebhookSecret == "" || p.DefaultBranch != "main" {
		t.Errorf("CreateProject = %+v", p)
	}
	if secret, err := c.ProjectWebhookSecret(ctx, "group/sub/app"); err != nil || secret != p.WebhookSecret {
		t.Errorf("ProjectWebhookSecret = %q, %v; want %q", secret, err, p.WebhookSecret)
	}
	if got, err := c.Project(ctx, "group/sub/app"); err != nil || got.ID != p.ID || got.WebhookSecret != "" {
		t.Errorf("Project = %+v, %v", got, err)
	}
	if _, err := c.SetProjectVariable(ctx, "group/sub/app", client.ProjectVariable{Key: "B", Value: "secret-value", Masked: true}); err != nil {
		t.Errorf("SetProjectVariable = %v", err)
	}
	if vs, err := c.ProjectVariables(ctx, "group/sub/app"); err != nil || len(vs) != 2 || vs[1].Key != "B" || !vs[1].Masked || vs[1].Value != "" {
		t.Errorf("ProjectVariables = %+v, %v", vs, err)
	}
	up, err := c.UpdateProject(ctx, "group/sub/app", client.ProjectSpec{DefaultBranch: ptr("trunk"), Version: p.Version + 1})
	if err != nil || up.DefaultBranch != "trunk" {
		t.Errorf("UpdateProject = %+v, %v", up, err)
	}
	_, err = c.UpdateProject(ctx, "group/sub/app", client.ProjectSpec{DefaultBranch: ptr("x"), Version: p.Version})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("UpdateProject(stale) = %v, want 409", err)
	}
	s, err := c.CreateSchedule(ctx, "group/sub/app", client.ScheduleSpec{Cron: ptr("0 4 * * 1-5"), CronTimezone: ptr("America/New_York")})
	if err != nil || s.Ref != "trunk" || s.NextRunAt == nil {
		t.Fatalf("CreateSchedule = %+v, %v", s, err)
	}
	_, err = c.CreateSchedule(ctx, "group/sub/app", client.ScheduleSpec{Cron: ptr("nope")})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != "cron" {
		t.Errorf("CreateSchedule(bad cron) = %v, want 400 for cron", err)
	}
	if s2, err := c.UpdateSchedule(ctx, "group/sub/app", s.ID, client.ScheduleSpec{Active: ptr(false)}); err != nil || s2.Active || s2.NextRunAt != nil {
		t.Errorf("UpdateSchedule = %+v, %v", s2, err)
	}
	if l, err := c.Schedules(ctx, "group/sub/app"); err != nil || len(l) != 1 {
		t.Errorf("Schedules = %+v, %v", l, err)
	}
	if err := c.DeleteSchedule(ctx, "group/sub/app", s.ID); err != nil {
		t.Errorf("DeleteSchedule = %v", err)
	}
	if ps, err := c.Projects(ctx, false); err != nil || len(ps) != 1 || ps[0].Name != "group/sub/app" {
		t.Errorf("Projects = %+v, %v", ps, err)
	}
	if err := c.DeleteProject(ctx, "group/sub/app"); err != nil {
		t.Errorf("DeleteProject = %v", err)
	}
	if _, err := c.ProjectWebhookSecret(ctx, "group/sub/app"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Errorf("ProjectWebhookSecret after delete = %v, want 404", err)
	}
}
