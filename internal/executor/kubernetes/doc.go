// Package kubernetes is the kubernetes executor: one pod per job, with a
// build container in the job's image, a helper container in drover's
// helper image and the job's services as further containers, and stage
// scripts run by the attach strategy: each stage's script is stored in
// the pod's emptyDir and started detached in the build container (git
// and the cache and artifact stages in the helper), writing its output
// and exit code to files there, and the helper follows the output file
// from a byte offset into the job's trace. A stage thus outlives the
// manager that started it: a restarted manager (or another one sharing
// its job store) re-attaches from the offset it saved, with no byte of
// the log lost or doubled (executor.Stateful). The mechanism is package
// detached's, shared with the docker executor.
//
// The job's variables are in a Secret of the job's own, read by
// reference from the containers and mounted for file variables: no value
// is in the pod spec. Pods and secrets are labelled with the job, the
// runner and the manager's system_id, so that a manager that starts again
// deletes those of jobs it will not resume (executor.Sweeper).
package kubernetes
