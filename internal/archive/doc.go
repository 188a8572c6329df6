// Package archive makes and reads the zip archives that carry a job's cache
// and artifacts, in the format GitLab Runner uses for them, so that a cache
// GitLab Runner wrote to a shared bucket can be restored by drover and the
// other way round.
//
// # Selection
//
// [Select] turns the paths and exclude patterns of a job's cache or
// artifacts section into the sorted list of files, directories and
// symlinks to archive. Patterns are relative to the build directory and
// use doublestar syntax as GitLab does (`*`, `?`, `[...]`, `{a,b}`, and
// `**` for any number of directories); a pattern that matches a directory
// takes in everything under it, and symlinks are never followed. A pattern
// that leaves the build directory is refused with an error naming it.
// Exclude patterns are matched against every selected path on its own, as
// GitLab does: `node_modules/.cache` drops only the directory entry, while
// `node_modules/.cache/**` drops what is in it.
//
// # Create
//
// [Create] streams a zip archive of a selection to an io.Writer without
// copying the tree anywhere first. Files are cut into chunks which a pool
// of workers compresses concurrently (raw deflate, the chunks of one file
// joined with sync flushes as pigz does), while one goroutine writes the
// entries in selection order with precomputed sizes and CRC-32s. The bytes
// held in memory are bounded by [CreateOptions.MemoryLimit] whatever the
// size of the files. Mode bits, modification times (to the second),
// directories and symlinks (as symlinks) are kept.
//
// # Extract
//
// [Extract] restores an archive under a destination directory and refuses,
// with an error naming the entry and the reason, anything that would write
// outside it: absolute names, `..` escapes, symlinks whose target leaves
// the destination, entries that would be written through a symlink, and
// truncated or corrupt archives. Every file is written under a temporary
// name and renamed into place once complete, so no half-written file is
// ever visible under its real name. The central directory is read as a
// stream, a record at a time, once to check every entry before anything
// is written, once to write them and once for the directories' modes and
// times, so that memory does not grow with the number of entries (but
// for 16 bytes per entry during the check, to find repeated names).
// [ExtractReader] does the same for a non-seekable stream by spooling it
// to a temporary file first. [ExtractOptions.MaxBytes] and
// [ExtractOptions.MaxEntries] refuse a zip bomb during the check, before
// anything is written: the sizes the central directory declares are
// binding (an entry whose data expands further is corrupt).
package archive
