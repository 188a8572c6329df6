// Package sqlrow holds what the SQL stores (sqlite, postgres) share about
// the tables they lay out alike: the columns they select of an artifact,
// a pipeline, a project, a schedule and a project token, and the scan of
// such a row into the store's type. Times are stored as Unix nanoseconds
// (store.Nanos), a pipeline's spec as JSON text.
package sqlrow

import (
	"encoding/json"
	"fmt"

	"github.com/drover-ci/drover/internal/store"
)

// Scanner is a row to scan: a *sql.Row or *sql.Rows, a pgx.Row.
type Scanner interface{ Scan(dest ...any) error }

// ArtifactCols are an artifact's columns, from artifacts.
const ArtifactCols = `job_id, artifact_type, format, filename, file, size, sha256, created_at, expire_at`

// Artifact scans a row of ArtifactCols.
func Artifact(row Scanner) (store.Artifact, error) {
	var a store.Artifact
	var created, expire int64
	err := row.Scan(&a.JobID, &a.Type, &a.Format, &a.Filename, &a.File, &a.Size, &a.SHA256, &created, &expire)
	a.CreatedAt, a.ExpireAt = store.FromNanos(created), store.FromNanos(expire)
	return a, err
}

// PipelineCols are a pipeline's columns, from pipelines (or a CTE of its
// rows) as pl joined with projects (or a CTE of its rows) as p.
const PipelineCols = `pl.id, p.path, pl.project_id, pl.iid, pl.source, pl.ref, pl.tag, pl.sha, pl.before_sha, pl.status, pl.spec,
	pl.created_at, pl.started_at, pl.finished_at, pl.updated_at, pl.version`

// PipelineFrom is the FROM clause of PipelineCols.
const PipelineFrom = ` FROM pipelines pl JOIN projects p ON p.id = pl.project_id`

// Pipeline scans a row of PipelineCols.
func Pipeline(row Scanner) (store.Pipeline, error) {
	var p store.Pipeline
	var status, spec string
	var created, started, finished, updated int64
	if err := row.Scan(&p.ID, &p.Project, &p.ProjectID, &p.IID, &p.Source, &p.Ref, &p.Tag, &p.SHA, &p.BeforeSHA, &status, &spec,
		&created, &started, &finished, &updated, &p.Version); err != nil {
		return store.Pipeline{}, err
	}
	p.Status = store.PipelineStatus(status)
	if err := json.Unmarshal([]byte(spec), &p.Spec); err != nil {
		return store.Pipeline{}, fmt.Errorf("pipeline %d spec: %w", p.ID, err)
	}
	p.CreatedAt, p.StartedAt, p.FinishedAt, p.UpdatedAt = store.FromNanos(created), store.FromNanos(started), store.FromNanos(finished), store.FromNanos(updated)
	return p, nil
}

// ProjectCols are a project's columns, from projects.
const ProjectCols = `id, path, registered, repo_url, default_branch, config_path, variables, webhook_secret,
	forge_kind, forge_url, forge_repo, forge_token, created_at, updated_at, version`

// Project scans a row of ProjectCols.
func Project(row Scanner) (store.Project, error) {
	var p store.Project
	var created, updated int64
	if err := row.Scan(&p.ID, &p.Name, &p.Registered, &p.RepoURL, &p.DefaultBranch, &p.ConfigPath, &p.SealedVariables, &p.SealedWebhookSecret,
		&p.Forge.Kind, &p.Forge.URL, &p.Forge.Repo, &p.Forge.SealedToken, &created, &updated, &p.Version); err != nil {
		return store.Project{}, err
	}
	p.CreatedAt, p.UpdatedAt = store.FromNanos(created), store.FromNanos(updated)
	return p, nil
}

// ScheduleCols are a schedule's columns, from pipeline_schedules (or a
// CTE of its rows) as sc joined with projects as p.
const ScheduleCols = `sc.id, sc.project_id, p.path, sc.description, sc.ref, sc.cron, sc.cron_timezone, sc.variables, sc.active,
	sc.next_run_at, sc.last_pipeline_id, sc.owner, sc.created_at, sc.updated_at, sc.version`

// ScheduleFrom is the FROM clause of ScheduleCols.
const ScheduleFrom = ` FROM pipeline_schedules sc JOIN projects p ON p.id = sc.project_id`

// Schedule scans a row of ScheduleCols.
func Schedule(row Scanner) (store.Schedule, error) {
	var s store.Schedule
	var next, created, updated int64
	if err := row.Scan(&s.ID, &s.ProjectID, &s.Project, &s.Description, &s.Ref, &s.Cron, &s.CronTimezone, &s.SealedVariables, &s.Active,
		&next, &s.LastPipelineID, &s.Owner, &created, &updated, &s.Version); err != nil {
		return store.Schedule{}, err
	}
	s.NextRunAt, s.CreatedAt, s.UpdatedAt = store.FromNanos(next), store.FromNanos(created), store.FromNanos(updated)
	return s, nil
}

// TokenCols are a project token's columns, from project_tokens as t
// joined with projects as p.
const TokenCols = `t.id, t.project_id, p.path, t.name, t.role, t.token_hash, t.created_at, t.last_used_at, t.expires_at`

// TokenFrom is the FROM clause of TokenCols.
const TokenFrom = ` FROM project_tokens t JOIN projects p ON p.id = t.project_id`

// Token scans a row of TokenCols.
func Token(row Scanner) (store.ProjectToken, error) {
	var t store.ProjectToken
	var created, used, expires int64
	if err := row.Scan(&t.ID, &t.ProjectID, &t.Project, &t.Name, &t.Role, &t.TokenHash, &created, &used, &expires); err != nil {
		return store.ProjectToken{}, err
	}
	t.CreatedAt, t.LastUsedAt, t.ExpiresAt = store.FromNanos(created), store.FromNanos(used), store.FromNanos(expires)
	return t, nil
}
