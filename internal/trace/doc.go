// Package trace holds the job log buffer of the runner manager.
//
// A Buffer receives the output of a job (the executor writes stdout and
// stderr into it, possibly from several goroutines), masks secrets in it,
// enforces the runner's output limit and stores the result in a temporary
// file, so that even a log of several GiB keeps the manager's memory small.
// A streamer reads byte ranges of the stored log with ReadAt, concurrently
// with the writers, and sends them to the coordinator as trace PATCHes;
// Size and Checksum give the bytesize and "crc32:" checksum the final job
// update reports.
//
// # Masking
//
// Masking is defined on the whole log: scanning from the start, at each
// position the longest match of either a masked value or a token (a token
// prefix followed by at least one token character [A-Za-z0-9_-]) is
// replaced, by "[MASKED]" for a masked value and by the prefix followed by
// "[MASKED]" for a token, and the scan resumes after the match. On a tie a
// masked value wins over a token, and between tokens the longer prefix
// wins. A token's body is masked up to the next non-token character, but at
// most MaxTokenBody bytes of it.
//
// A Buffer produces exactly that output however the log is split into
// Write calls. To do so it holds back the shortest tail of the written data
// that can still turn into a match (a proper prefix of a masked value or of
// a token prefix, or a token not yet terminated); everything before it is
// stored at once so that live logs are not delayed. Finish flushes the held
// back tail.
//
// # Limit
//
// With a Limit, the stored bytes (after masking) stop at the limit, followed
// once by a notice; later output is dropped and Truncated reports true.
package trace
