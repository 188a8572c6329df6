package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// Webhooks: POST /api/v1/hooks/{forge}/{project...} starts a pipeline for
// a push, in the forge's own payload format (package forge), checked with
// the project's webhook secret. No admin token: the signature (or the
// token) is the authentication.
//
//	401 bad or missing signature: nothing started
//	404 unknown forge or a project that is not registered
//	400 a payload that is not a push (the field named); 413 too large
//	202 an event that starts nothing (ping, a deletion, another event,
//	    "[ci skip]", workflow:rules that filter the pipeline out)
//	200 a delivery received before (the same delivery id): its pipeline
//	201 the pipeline created, failed at once when the configuration does
//	    not compile (its errors on its page and on the forge's status)
//	422 a commit without the CI configuration, or one that cannot be
//	    fetched

// maxWebhookBody bounds a webhook's body: a push of a few hundred commits
// is well under it (forges cap theirs near 25 MiB, with every commit).
const maxWebhookBody = 4 << 20

// hookAnswer is the body of a webhook's answer.
type hookAnswer struct {
	Message   string           `json:"message,omitempty"`
	Duplicate bool             `json:"duplicate,omitempty"`
	Pipeline  *hookPipelineRef `json:"pipeline,omitempty"`
}

type hookPipelineRef struct {
	ID     int64  `json:"id"`
	IID    int64  `json:"iid,omitempty"`
	Status string `json:"status,omitempty"`
	WebURL string `json:"web_url"`
}

func (c *Coordinator) handleWebhook(w http.ResponseWriter, r *http.Request) {
	kind, err := forge.ParseForge(r.PathValue("forge"))
	if err != nil {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no such webhook: %v", err), "")
		return
	}
	name := strings.Trim(r.PathValue("project"), "/")
	proj, err := c.projectSettings(r.Context(), name)
	if err != nil {
		c.internalError(r.Context(), w, "webhook", err)
		return
	}
	if proj == nil {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no project %q is registered (drover project add)", name), "")
		return
	}
	secret, err := c.openString(proj.SealedWebhookSecret, webhookSecretPurpose)
	if err != nil {
		c.internalError(r.Context(), w, "webhook: open the project's secret", err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			runnerapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the webhook's body is over %d bytes", maxWebhookBody), "")
			return
		}
		runnerapi.WriteError(w, http.StatusBadRequest, "read the webhook's body: "+err.Error(), "")
		return
	}
	push, err := forge.Parse(kind, secret, r.Header, body)
	var ign *forge.IgnoredError
	switch {
	case errors.Is(err, forge.ErrSignature):
		c.log.Warn("webhook refused: bad signature", "project", name, "forge", kind, "remote", r.RemoteAddr, "err", err)
		runnerapi.WriteError(w, http.StatusUnauthorized, err.Error(), "")
		return
	case errors.As(err, &ign):
		c.log.Info("webhook ignored", "project", name, "forge", kind, "reason", ign.Error())
		runnerapi.WriteJSON(w, http.StatusAccepted, hookAnswer{Message: "ignored: " + ign.Error()})
		return
	case errors.Is(err, forge.ErrPayload):
		runnerapi.WriteError(w, http.StatusBadRequest, err.Error(), "")
		return
	case err != nil:
		c.internalError(r.Context(), w, "webhook", err)
		return
	case push.SkipCI():
		c.log.Info("webhook: push skipped by its commit message", "project", name, "ref", push.Ref, "sha", push.After)
		runnerapi.WriteJSON(w, http.StatusAccepted, hookAnswer{Message: "skipped: the commit message asks for no pipeline ([ci skip])"})
		return
	}
	// From here the push is the coordinator's: a forge that stops waiting
	// for the answer (Gitea's webhooks give up after 5 s, GitHub's and
	// GitLab's after 10) must not leave a claimed delivery without its
	// pipeline, since the forge's redelivery would find it claimed. The
	// fetch has its own bound (createPipeline).
	ctx := context.WithoutCancel(r.Context())
	if push.DeliveryID != "" {
		isNew, pid, err := c.st.ClaimDelivery(ctx, proj.ID, push.DeliveryID, c.clock.Now())
		if err != nil {
			c.internalError(r.Context(), w, "webhook: record the delivery", err)
			return
		}
		if !isNew {
			ans := hookAnswer{Duplicate: true, Message: "delivery " + push.DeliveryID + " was received before"}
			if pid != 0 {
				ans.Pipeline = &hookPipelineRef{ID: pid, WebURL: c.baseURL(r) + "/pipelines/" + strconv.FormatInt(pid, 10)}
			}
			runnerapi.WriteJSON(w, http.StatusOK, ans)
			return
		}
	}
	ref := push.Name
	if push.Tag {
		ref = "refs/tags/" + push.Name
	}
	repoURL := proj.RepoURL
	if repoURL == "" {
		repoURL = push.RepoURL
	}
	p, err := c.createPipeline(ctx, createPipelineRequest{
		Project: proj.Name, RepoURL: repoURL, Ref: ref, SHA: push.After, BeforeSHA: push.Before,
		Source: "push", RecordErrors: true, BaseURL: c.baseURL(r), TriggeredBy: triggeredBy(kind, push),
	})
	if errors.Is(err, ciconfig.ErrFiltered) || errors.Is(err, ciconfig.ErrNoJobs) {
		c.log.Info("webhook: no pipeline", "project", name, "ref", push.Ref, "sha", push.After, "reason", err)
		runnerapi.WriteJSON(w, http.StatusAccepted, hookAnswer{Message: "no pipeline: " + err.Error()})
		return
	}
	// A failure that another try may not meet (the repository could not
	// be fetched, the database failed) gives the delivery back: the
	// forge's redelivery gets its pipeline.
	release := func() {
		if push.DeliveryID == "" {
			return
		}
		if err := c.st.ReleaseDelivery(ctx, proj.ID, push.DeliveryID); err != nil {
			c.log.Error("webhook: give the delivery back", "project", name, "delivery", push.DeliveryID, "err", err)
		}
	}
	var pe *pipelineError
	if errors.As(err, &pe) {
		code := pe.code
		if code == http.StatusBadRequest {
			code = http.StatusUnprocessableEntity // the request was the forge's: the commit is what failed
			release()
		}
		c.log.Warn("webhook: no pipeline", "project", name, "ref", push.Ref, "sha", push.After, "err", pe.msg)
		writePipelineError(w, code, pe)
		return
	}
	if err != nil {
		release()
		c.internalError(ctx, w, "webhook: create the pipeline", err)
		return
	}
	if push.DeliveryID != "" {
		if err := c.st.SetDeliveryPipeline(ctx, proj.ID, push.DeliveryID, p.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			c.log.Error("webhook: attach the pipeline to its delivery", "pipeline_id", p.ID, "delivery", push.DeliveryID, "err", err)
		}
	}
	c.log.Info("webhook: pipeline created", "pipeline_id", p.ID, "project", name, "forge", kind, "ref", push.Ref,
		"sha", push.After, "delivery", push.DeliveryID, "status", p.Status)
	runnerapi.WriteJSON(w, http.StatusCreated, hookAnswer{Pipeline: &hookPipelineRef{
		ID: p.ID, IID: p.IID, Status: string(p.Status), WebURL: c.baseURL(r) + "/pipelines/" + strconv.FormatInt(p.ID, 10),
	}})
}

// triggeredBy says who pushed, for the pipeline pages.
func triggeredBy(kind forge.Forge, p *forge.Push) string {
	who := p.Pusher
	if who == "" {
		who = p.AuthorName
	}
	s := string(kind) + " push"
	if who != "" {
		s += " by " + who
	}
	return oneLine(s, 255)
}

// oneLine is s with its runs of white space made one space, cut to at
// most n bytes on a character's boundary.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
