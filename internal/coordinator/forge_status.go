package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/store"
)

// Commit statuses: every status a pipeline of a project with a forge
// takes is posted to the forge, on the pipeline's commit, under the
// context StatusContext, linking to the pipeline's page. A Notifier
// posts them in the background (retries with backoff, only the newest
// status of a commit waits): a forge that is slow or down never holds a
// pipeline back. Statuses are not a record: one still waiting when the
// coordinator stops is not sent.

// StatusContext is the context (GitLab: name) of drover's commit
// statuses: one per pipeline of a commit.
const StatusContext = "drover/pipeline"

func (c *Coordinator) newStatusNotifier() *forge.Notifier {
	poster := c.cfg.ForgeStatuses
	if poster == nil {
		poster = &forge.StatusClient{HTTP: &http.Client{Timeout: 30 * time.Second}, UserAgent: "drover-coordinator"}
	}
	return forge.NewNotifier(c.log.With("component", "forge statuses"), forge.NotifierConfig{
		Poster: poster, Clock: c.clock,
		OnAttempt: func(a forge.Attempt) {
			result := "delivered"
			switch {
			case a.Err != nil && a.RetryIn > 0:
				result = "retried"
			case a.Err != nil:
				result = "failed"
			}
			if c.metrics != nil {
				c.metrics.forgeStatuses.WithLabelValues(string(a.Status.Repo.Forge), result).Inc()
			}
		},
	})
}

// pipelineStatusChanged is told of every status a pipeline takes after
// its creation (recordPipelineStatus; a pipeline that failed to compile).
func (c *Coordinator) pipelineStatusChanged(ctx context.Context, p store.Pipeline) {
	if err := c.sendForgeStatus(ctx, p); err != nil {
		c.log.Error("commit status not sent", "pipeline_id", p.ID, "project", p.Project, "err", err)
	}
}

// sendForgeStatus queues the commit status of p, when its project
// reports to a forge.
func (c *Coordinator) sendForgeStatus(ctx context.Context, p store.Pipeline) error {
	proj, err := c.projectSettings(ctx, p.Project)
	if err != nil || proj == nil || proj.Forge.Kind == "" {
		return err
	}
	kind, err := forge.ParseForge(proj.Forge.Kind)
	if err != nil {
		return fmt.Errorf("project %s: %w", p.Project, err)
	}
	token, err := c.openString(proj.Forge.SealedToken, forgeTokenPurpose)
	if err != nil {
		return fmt.Errorf("project %s: open the forge token: %w", p.Project, err)
	}
	if token == "" {
		return errors.New("project " + p.Project + " has a forge but no forge token")
	}
	target := ""
	if base := cmp.Or(c.cfg.PublicURL, p.Spec.BaseURL); base != "" {
		target = base + "/pipelines/" + strconv.FormatInt(p.ID, 10)
	}
	c.statuses.Send(forge.Status{
		Repo: forge.Repo{Forge: kind, APIURL: proj.Forge.URL, Path: proj.Forge.Repo, Token: token},
		SHA:  p.SHA, State: forge.PipelineStatus(p.Status), Context: StatusContext,
		TargetURL: target, Description: statusDescription(&p), Ref: p.Ref,
	})
	return nil
}

// statusDescription is the short text of p's commit status.
func statusDescription(p *store.Pipeline) string {
	if len(p.Spec.Errors) > 0 {
		return "invalid CI configuration: " + p.Spec.Errors[0]
	}
	words := map[store.PipelineStatus]string{
		store.PipelineCreated: "created", store.PipelinePending: "pending", store.PipelineRunning: "running",
		store.PipelineSuccess: "passed", store.PipelineFailed: "failed", store.PipelineCanceled: "canceled",
		store.PipelineSkipped: "skipped", store.PipelineManual: "waiting for a manual action",
		store.PipelineScheduled: "waiting for a delayed job",
	}
	return fmt.Sprintf("Pipeline #%d %s", p.ID, cmp.Or(words[p.Status], string(p.Status)))
}
