// Package difftest is the differential suite: it runs GitLab job payloads
// (testdata/fixtures, GitLab's jobs/request JSON) through a runner manager
// — drover's, or the real GitLab Runner — against drover's coordinator,
// and records what the runner did with each: the final state, failure
// reason and exit code, the order of its state updates, every artifact
// upload (type, format, file name, archive listing), the cache it left,
// and its job log normalised for times, ids, tokens and paths.
//
// Both runners get the same bytes: the coordinator's test-only payload
// path (coordinator.Config.TestPayloads) hands each fixture out as
// written. The real GitLab Runner's observations are recorded once, by
// scripts/difftest-record.sh, into testdata/golden (with the version and
// commit they came from); the tests run drover on the same fixtures and
// compare against them, so CI never needs GitLab Runner. Where drover
// differs on purpose, a rule of Deliberate says how and why (and
// docs/differential.md lists them): nothing else may differ.
package difftest
