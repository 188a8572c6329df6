package helper

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Main runs `drover helper <command> [flags]` with args after "helper"
// and returns the exit code. Commands:
//
//	follow --log F --exit F [--gone F] [--from N] [--claim DIR] [--probe]
//	wait --timeout D host:port...
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: drover helper follow|wait [flags]")
		return 2
	}
	switch args[0] {
	case "follow":
		fs := flag.NewFlagSet("follow", flag.ContinueOnError)
		fs.SetOutput(stderr)
		var o FollowOptions
		fs.StringVar(&o.Log, "log", "", "the stage's output file")
		fs.StringVar(&o.Exit, "exit", "", "the stage's exit code file")
		fs.StringVar(&o.Gone, "gone", "", "created when the stage's container stopped")
		fs.StringVar(&o.Claim, "claim", "", "claim this directory if the stage never started")
		fs.Int64Var(&o.From, "from", 0, "first byte of the output to copy")
		fs.BoolVar(&o.Probe, "probe", false, "only report whether the stage started")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if o.Log == "" || o.Exit == "" {
			fmt.Fprintln(stderr, "follow: --log and --exit are required")
			return 2
		}
		o.ClaimIfNotStarted = o.Claim != ""
		if err := Follow(ctx, o, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "follow:", err)
			return 1
		}
		return 0
	case "wait":
		fs := flag.NewFlagSet("wait", flag.ContinueOnError)
		fs.SetOutput(stderr)
		timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		failed := WaitTCP(ctx, fs.Args(), *timeout)
		if len(failed) > 0 {
			fmt.Fprintln(stdout, strings.Join(failed, " "))
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "drover helper: unknown command %q\n", args[0])
	return 2
}
