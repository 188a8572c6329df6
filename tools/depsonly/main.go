package main
import (
_ "github.com/BurntSushi/toml"
_ "github.com/spf13/cobra"
_ "modernc.org/sqlite"
_ "github.com/prometheus/client_golang/prometheus"
_ "github.com/prometheus/client_golang/prometheus/promhttp"
_ "github.com/google/go-cmp/cmp"
)
func main(){}
