// Package examples embeds the example jobs that `drover local` runs. Each
// *.toml file is one job: its name, script lines, variables, cache,
// artifacts, the earlier examples it needs and what it is expected to end
// as (see local.Example).
package examples

import "embed"

// FS holds the example job files.
//
//go:embed *.toml
var FS embed.FS
