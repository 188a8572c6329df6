package coordinator

import "github.com/drover-ci/drover/internal/coordinator/store"

// Job states and who moves a job between them:
//
//	                 submit
//	                   │
//	                   ▼
//	created ──────► pending ◄───────────── (two-phase: decline / ack deadline)
//	                   │   │                              ▲
//	   claim (classic) │   └─ claim (two-phase, later) ─► waiting_for_runner_ack
//	                   ▼                                  │ accept
//	                running ◄─────────────────────────────┘
//	                │  │  │
//	 PUT success ◄──┘  │  └──► PUT failed / reaper (timeout, silent runner)
//	       │           │ cancel (admin)            │
//	       ▼           ▼                           ▼
//	   success     canceling ── PUT failed ──► canceled      failed
//	                   │  └──── PUT success ──► success
//	                   └─ reaper: silent ──► canceled; timeout ──► failed
//
//	pending / created ── cancel ──► canceled
//
// Every edge is a compare-and-set in the store (TransitionJob), so two
// writers (a runner's PUT and the reaper, two runners claiming) never both
// win.
var (
	// fromQueue is where a claim takes a job from.
	fromQueue = []store.Status{store.StatusPending}
	// fromActive holds the states in which a runner owns the job and may
	// send PUT/PATCH with its job token.
	fromActive = []store.Status{store.StatusRunning, store.StatusCanceling}
	// fromCancelable holds the states an admin cancel turns into canceled
	// at once.
	fromCancelable = []store.Status{store.StatusCreated, store.StatusPending}
)

// claimTarget is the state a claimed job enters. Runners that announce
// two_phase_job_commit will go to waiting_for_runner_ack once the
// runner_provisioning endpoint exists; until then every runner gets the
// classic pending → running. (Every current GitLab Runner announces the
// feature, yet sends its "accept" PUT at once, so classic is also correct
// for them.)
func claimTarget(twoPhase bool) store.Status {
	_ = twoPhase
	return store.StatusRunning
}

// isActive reports whether a runner owns a job in status s.
func isActive(s store.Status) bool {
	return s == store.StatusRunning || s == store.StatusCanceling
}

// remoteStatus is the Job-Status header value for s, or "" when a runner
// has no business with a job in s.
func remoteStatus(s store.Status) string {
	switch s {
	case store.StatusRunning, store.StatusCanceling, store.StatusCanceled, store.StatusFailed, store.StatusSuccess:
		return string(s)
	}
	return ""
}
