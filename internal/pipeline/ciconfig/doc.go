// Package ciconfig is the front end of drover's pipelines: it reads a
// repository's .gitlab-ci.yml with its local includes, applies GitLab's
// semantics (extends, default, workflow and job rules, only/except,
// parallel and parallel:matrix, needs), and compiles the jobs a pipeline
// of given variables runs ([Compile]), with every problem reported at its
// file:line.
//
// It works on files and values only: it runs nothing and stores nothing.
// The coordinator turns a compiled [Pipeline] into queued jobs (drover
// pipeline run, drover exec); drover lint prints it.
package ciconfig
