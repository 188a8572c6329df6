package coordinator

import "github.com/drover-ci/drover/internal/store"

// Job states and who moves a job between them:
//
//	                submit
//	                  │
//	                  ▼
//	created ─────► pending ◄───────────────────────────┐ decline / ack deadline passed
//	               │     │ claim (two_phase_job_commit) │ (token retired, return counted)
//	               │     ▼                              │
//	               │   waiting_for_runner_ack ──────────┘
//	       claim   │     │  │  │  └─ keep-alive: deadline = now + AckTimeout
//	     (classic) │     │  │  └──── cancel ──► canceled (token retired)
//	               │     │  └─ decline / deadline with MaxProvisioningRetries used up
//	               │     │       ──► failed (runner_provisioning_timeout)
//	               ▼     ▼ accept ("accepted", or PUT state=running)
//	              running
//	               │  │  │
//	 PUT success ◄─┘  │  └──► PUT failed / reaper (timeout, silent runner) ──► failed
//	      │           │ cancel (admin)
//	      ▼           ▼
//	  success     canceling ── PUT failed or success ──► canceled (as GitLab)
//	                  └─ reaper: silent ──► canceled; timeout ──► failed
//
//	pending / created ── cancel ──► canceled
//
// Every edge is a compare-and-set in the store (TransitionJob), so two
// writers (a runner's PUT and the reaper, two runners claiming) never both
// win. Edges out of waiting_for_runner_ack are computed from a job read
// under the job lock and applied with IfVersion, so a decision about one
// assignment can never land on the next one.
//
// Job tokens belong to one assignment. An edge that takes the job from its
// runner (decline, ack deadline, cancel while waiting) retires the token;
// calls with a retired token are answered 409 with Job-Status (goneStatus).
var (
	// fromQueue is where a claim takes a job from.
	fromQueue = []store.Status{store.StatusPending}
	// fromActive holds the states in which a runner runs the job and may
	// send PUT/PATCH with its job token.
	fromActive = []store.Status{store.StatusRunning, store.StatusCanceling}
	// fromWaiting is the state of a job handed to a two-phase runner that
	// has not accepted it yet.
	fromWaiting = []store.Status{store.StatusWaitingForRunnerAck}
)

// claimTarget is the state a claimed job enters: runners that announce
// two_phase_job_commit must accept it first. (Every current GitLab Runner
// announces the feature and sends its accept, PUT state=running, at once.)
func claimTarget(twoPhase bool) store.Status {
	if twoPhase {
		return store.StatusWaitingForRunnerAck
	}
	return store.StatusRunning
}

// isActive reports whether a runner runs a job in status s.
func isActive(s store.Status) bool {
	return s == store.StatusRunning || s == store.StatusCanceling
}

// runnerHolds reports whether the runner of the current assignment may
// still talk about a job in status s (traces are taken while it
// provisions).
func runnerHolds(s store.Status) bool {
	return isActive(s) || s == store.StatusWaitingForRunnerAck
}

// remoteStatus is the Job-Status header value for s, or "" when a runner
// has no business with a job in s. A job waiting for its runner's accept
// is "pending", as GitLab reports it in its two-phase flow.
func remoteStatus(s store.Status) string {
	switch s {
	case store.StatusRunning, store.StatusCanceling, store.StatusCanceled, store.StatusFailed, store.StatusSuccess:
		return string(s)
	case store.StatusPending, store.StatusWaitingForRunnerAck:
		return string(store.StatusPending)
	}
	return ""
}

// goneStatus is the Job-Status of a 409: the caller's assignment is over.
// "failed" when the job failed, otherwise "canceled", because that is the
// value on which GitLab Runner drops a job (a 409 alone makes it carry on).
func goneStatus(s store.Status) string {
	if s == store.StatusFailed {
		return string(store.StatusFailed)
	}
	return string(store.StatusCanceled)
}
