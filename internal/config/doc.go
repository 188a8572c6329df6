// Package config reads, checks and writes the runner manager's config.toml,
// the file `drover run` is driven by. It accepts GitLab Runner's format.
//
// # Parsing
//
// [Parse] and [Load] decode the file, fill in GitLab Runner's defaults and
// validate the result. Every problem is an [*Error] naming the file, the line
// and the key ("config.toml:12: runners[0].limit: must be 0 (unlimited) or more"),
// and all the problems of a file are reported together, joined in line
// order. An executor must be one this build has ([Executors]). Unknown keys
// are reported as [Warning] values with their line instead of failing the
// load. Syntax errors carry the parser's position; the lines of keys come
// from a scan of the source, because the TOML library does not expose key
// positions. GitLab Runner sections are kept verbatim (RunnerConfig.Docker,
// Config.Extra, ...), so that they do not get lost when the file is written
// back; those that drover reads but does not act on ([runners.cache],
// [session_server], referees, feature flags, the sub-table of an executor
// the runner does not use) draw a warning with their line.
//
// Only runners[].url and runners[].token are subject to $VAR / ${VAR}
// expansion; [Config.Save] writes the unexpanded form back when the value
// was not changed in memory, so secrets given through the environment stay
// out of the file.
//
// # Writing
//
// [Config.Save] writes the whole file atomically (temporary file in the same
// directory, fsync, rename) with mode 0600, so a crash never leaves a
// half-written config behind.
//
// # System ID
//
// [LoadOrCreateSystemID] manages .runner_system_id next to config.toml, the
// identifier of this runner manager sent to GitLab as system_id.
package config
