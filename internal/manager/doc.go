// Package manager is the runner manager behind `drover run`: it turns a
// config.toml into workers that acquire executor capacity, ask the
// coordinator for jobs (long polling), run them through an executor,
// stream their logs and report their final state with retries.
//
// # Job lifecycle
//
//	requested ──► PUT running ──► build stages ──► final trace flush ──► PUT final ──► released
//	                  │                 ▲   │
//	                  │ Job-Status      │   └─ canceling: stop script, run after_script
//	                  └─ canceled/403 ──┴──► dropped (no further calls)
//
// # Shutdown
//
// Two different stops, never confused: Drain (SIGQUIT) stops asking for
// jobs and waits for the running ones; cancelling the context given to Run
// (SIGTERM/SIGINT) aborts running jobs, which are reported failed with
// runner_interrupted within shutdown_timeout.
package manager
