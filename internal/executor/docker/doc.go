// Package docker is the docker executor (executor = "docker",
// [runners.docker]): each job runs in containers of its own on a Docker
// engine, with the job's services, a helper container (git, cache and
// artifacts, following detached stages) and a build container in the
// job's image, on a network of the job's own; the stage scripts run by
// exec in those long-lived containers, and a resumable job's stages run
// detached (package detached) so that they survive the manager.
//
// It reaches Docker only through [Engine], chosen per job: the runner's
// own host, or an autoscaled instance's engine that a wrapping provider
// passes as a [Target] (package dockerfleet). It decides nothing about
// machines; the manager drives it as an executor.Provider and the build
// runner as an executor.Executor.
package docker
