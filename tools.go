//go:build tools

// Package tools pins dependencies that the code will import as it grows.
package tools

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/spf13/cobra"
	_ "gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/installer"
	_ "modernc.org/sqlite"
)
