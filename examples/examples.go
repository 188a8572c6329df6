// Package examples embeds the example jobs that `drover local` runs. Each
// *.toml file is one job: its name, script lines, variables and what it is
// expected to end as.
package examples

import "embed"

// FS holds the example job files.
//
//go:embed *.toml
var FS embed.FS
