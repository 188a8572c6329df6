package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ProjectVariable is a project's (or a schedule's) CI/CD variable with
// GitLab's flags. The coordinator never answers values.
type ProjectVariable struct {
	Key       string `json:"key"`
	Value     string `json:"value,omitempty"`
	Masked    bool   `json:"masked"`
	Protected bool   `json:"protected"`
	File      bool   `json:"file"`
	Raw       bool   `json:"raw"`
}

// ForgeSpec is the forge part of a ProjectSpec; nil fields are left as
// they are.
type ForgeSpec struct {
	Kind  *string `json:"kind,omitempty"`
	URL   *string `json:"url,omitempty"`
	Repo  *string `json:"repo,omitempty"`
	Token *string `json:"token,omitempty"`
}

// ProjectSpec is the body of a project's creation (Name required) or
// change (no Name); nil fields are left as they are, or take their
// defaults.
type ProjectSpec struct {
	Name          *string            `json:"name,omitempty"`
	RepoURL       *string            `json:"repo_url,omitempty"`
	DefaultBranch *string            `json:"default_branch,omitempty"`
	ConfigPath    *string            `json:"config_path,omitempty"`
	Variables     *[]ProjectVariable `json:"variables,omitempty"`
	WebhookSecret *string            `json:"webhook_secret,omitempty"`
	Forge         *ForgeSpec         `json:"forge,omitempty"`
	// Version, when set, makes a change apply only to that version.
	Version int64 `json:"version,omitempty"`
}

// Project is a project as the coordinator reports it.
type Project struct {
	ID            int64             `json:"id"`
	Name          string            `json:"name"`
	Registered    bool              `json:"registered"`
	RepoURL       string            `json:"repo_url"`
	DefaultBranch string            `json:"default_branch"`
	ConfigPath    string            `json:"config_path"`
	Variables     []ProjectVariable `json:"variables"`
	// WebhookSecret is set only in the answer to the creation.
	WebhookSecret string `json:"webhook_secret,omitempty"`
	Forge         struct {
		Kind     string `json:"kind"`
		URL      string `json:"url,omitempty"`
		Repo     string `json:"repo,omitempty"`
		TokenSet bool   `json:"token_set"`
	} `json:"forge"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Version   int64      `json:"version"`
}

// projectPath is the API path of project (a name or a numeric id).
func projectPath(project string) string {
	return "/api/v1/projects/" + url.PathEscape(project)
}

// CreateProject registers a project; the answer carries its webhook
// secret, once.
func (c *Client) CreateProject(ctx context.Context, spec ProjectSpec) (*Project, error) {
	return call[Project](ctx, c, http.MethodPost, "/api/v1/projects", spec, http.StatusCreated)
}

// Projects lists the registered projects (all: also those only their
// pipelines or jobs created).
func (c *Client) Projects(ctx context.Context, all bool) ([]Project, error) {
	path := "/api/v1/projects"
	if all {
		path += "?all=true"
	}
	return callList[Project](ctx, c, http.MethodGet, path, nil, http.StatusOK)
}

// Project returns a project by name (group/name) or id.
func (c *Client) Project(ctx context.Context, project string) (*Project, error) {
	return call[Project](ctx, c, http.MethodGet, projectPath(project), nil, http.StatusOK)
}

// UpdateProject changes what spec sets.
func (c *Client) UpdateProject(ctx context.Context, project string, spec ProjectSpec) (*Project, error) {
	return call[Project](ctx, c, http.MethodPatch, projectPath(project), spec, http.StatusOK)
}

// DeleteProject drops a project's settings, schedules and webhook
// deliveries; its pipelines and jobs stay.
func (c *Client) DeleteProject(ctx context.Context, project string) error {
	_, err := c.do(ctx, http.MethodDelete, projectPath(project), nil, nil, http.StatusNoContent)
	return err
}

// ProjectWebhookSecret returns the secret a project's webhooks are
// checked with.
func (c *Client) ProjectWebhookSecret(ctx context.Context, project string) (string, error) {
	var out struct {
		WebhookSecret string `json:"webhook_secret"`
	}
	if _, err := c.do(ctx, http.MethodGet, projectPath(project)+"/webhook_secret", nil, &out, http.StatusOK); err != nil {
		return "", err
	}
	return out.WebhookSecret, nil
}

// ProjectVariables lists a project's variables (without values).
func (c *Client) ProjectVariables(ctx context.Context, project string) ([]ProjectVariable, error) {
	return callList[ProjectVariable](ctx, c, http.MethodGet, projectPath(project)+"/variables", nil, http.StatusOK)
}

// SetProjectVariable adds or replaces variable v.Key of a project.
func (c *Client) SetProjectVariable(ctx context.Context, project string, v ProjectVariable) (*Project, error) {
	return call[Project](ctx, c, http.MethodPut, projectPath(project)+"/variables/"+url.PathEscape(v.Key), v, http.StatusOK)
}

// DeleteProjectVariable removes variable key of a project.
func (c *Client) DeleteProjectVariable(ctx context.Context, project, key string) (*Project, error) {
	return call[Project](ctx, c, http.MethodDelete, projectPath(project)+"/variables/"+url.PathEscape(key), nil, http.StatusOK)
}

// ScheduleSpec is the body of a schedule's creation (Cron required) or
// change; nil fields are left as they are, or take their defaults (ref:
// the project's default branch; cron_timezone: UTC; active: true).
type ScheduleSpec struct {
	Description  *string            `json:"description,omitempty"`
	Ref          *string            `json:"ref,omitempty"`
	Cron         *string            `json:"cron,omitempty"`
	CronTimezone *string            `json:"cron_timezone,omitempty"`
	Variables    *[]ProjectVariable `json:"variables,omitempty"`
	Active       *bool              `json:"active,omitempty"`
	Owner        *string            `json:"owner,omitempty"`
	Version      int64              `json:"version,omitempty"`
}

// Schedule is a pipeline schedule as the coordinator reports it.
type Schedule struct {
	ID             int64             `json:"id"`
	Project        string            `json:"project"`
	Description    string            `json:"description"`
	Ref            string            `json:"ref"`
	Cron           string            `json:"cron"`
	CronTimezone   string            `json:"cron_timezone"`
	Variables      []ProjectVariable `json:"variables"`
	Active         bool              `json:"active"`
	NextRunAt      *time.Time        `json:"next_run_at,omitempty"`
	LastPipelineID int64             `json:"last_pipeline_id,omitempty"`
	Owner          string            `json:"owner,omitempty"`
	CreatedAt      *time.Time        `json:"created_at,omitempty"`
	UpdatedAt      *time.Time        `json:"updated_at,omitempty"`
	Version        int64             `json:"version"`
}

func schedulePath(project string, id int64) string {
	return projectPath(project) + "/schedules/" + strconv.FormatInt(id, 10)
}

// CreateSchedule adds a pipeline schedule to a project.
func (c *Client) CreateSchedule(ctx context.Context, project string, spec ScheduleSpec) (*Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, projectPath(project)+"/schedules", spec, http.StatusCreated)
}

// Schedules lists a project's schedules.
func (c *Client) Schedules(ctx context.Context, project string) ([]Schedule, error) {
	return callList[Schedule](ctx, c, http.MethodGet, projectPath(project)+"/schedules", nil, http.StatusOK)
}

// Schedule returns one schedule of a project.
func (c *Client) Schedule(ctx context.Context, project string, id int64) (*Schedule, error) {
	return call[Schedule](ctx, c, http.MethodGet, schedulePath(project, id), nil, http.StatusOK)
}

// UpdateSchedule changes what spec sets; the next run is computed again.
func (c *Client) UpdateSchedule(ctx context.Context, project string, id int64, spec ScheduleSpec) (*Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPatch, schedulePath(project, id), spec, http.StatusOK)
}

// DeleteSchedule removes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, project string, id int64) error {
	_, err := c.do(ctx, http.MethodDelete, schedulePath(project, id), nil, nil, http.StatusNoContent)
	return err
}

// PlaySchedule runs a schedule's pipeline now.
func (c *Client) PlaySchedule(ctx context.Context, project string, id int64) (*Pipeline, error) {
	return call[Pipeline](ctx, c, http.MethodPost, schedulePath(project, id)+"/play", nil, http.StatusCreated)
}
