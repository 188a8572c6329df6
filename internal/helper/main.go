package helper

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/cache"
)

// DefaultCacheRequestTimeout bounds each request of the cache commands
// unless --request-timeout says otherwise: GitLab Runner's default
// CACHE_REQUEST_TIMEOUT, 10 minutes.
const DefaultCacheRequestTimeout = 10 * time.Minute

// Main runs `drover helper <command> [flags]` with args after "helper"
// and returns the exit code. Commands:
//
//	follow --log F --exit F [--gone F] [--pid F] [--from N] [--claim DIR] [--probe]
//	kill --pid-file F [--grace D]
//	wait --timeout D host:port...
//	cache-archiver --file F [--path P]... [--exclude P]... [--untracked] [--url U [--header K:V]... [--max-size N]] [--request-timeout D] [--timeout D]
//	cache-extractor --file F [--url U] [--request-timeout D] [--timeout D] [--extract-max-size N] [--extract-max-entries N]
//	artifacts-uploader --url U --id N --token T [--path P]... [--exclude P]... [--untracked] [--name N] [--artifact-type T] [--artifact-format F] [--expire-in E] [TLS]
//	artifacts-downloader --url U --id N --token T [--name N] [--extract-max-size N] [--extract-max-entries N] [TLS]
//
// TLS is [--tls-ca-file F] [--tls-cert-file F --tls-key-file F], by
// default the job's CI_SERVER_TLS_CA_FILE, CI_SERVER_TLS_CERT_FILE and
// CI_SERVER_TLS_KEY_FILE: the coordinator is verified with the CAs the
// runner uses (besides the system's) and shown its client certificate.
//
// The cache commands exit 0 when done, 1 when the cache could not be
// made or restored (the job goes on: the cache is best effort; the reason
// is on stderr) and 2 for bad flags.
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
		fs.StringVar(&o.PID, "pid", "", "holds the pid of the stage's wrapper: vanished when it is dead without an exit file")
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
	case "kill":
		fs := flag.NewFlagSet("kill", flag.ContinueOnError)
		fs.SetOutput(stderr)
		var o KillOptions
		fs.StringVar(&o.PIDFile, "pid-file", "", "file holding the pid of the stage's wrapper")
		fs.DurationVar(&o.Grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if o.PIDFile == "" {
			fmt.Fprintln(stderr, "kill: --pid-file is required")
			return 2
		}
		if _, err := KillStage(ctx, o, stdout); err != nil {
			fmt.Fprintln(stderr, "kill:", err)
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
	case "cache-archiver", "cache-extractor":
		return cacheMain(ctx, args[0], args[1:], stdout, stderr)
	case "artifacts-uploader", "artifacts-downloader":
		return artifactsMain(ctx, args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "drover helper: unknown command %q\n", args[0])
	return 2
}

// cacheMain runs cache-archiver or cache-extractor.
func cacheMain(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var paths, excludes, headers listFlag
	file := fs.String("file", "", "the local cache archive (required)")
	u := fs.String("url", "", "pre-signed URL of the shared cache (GET to extract, PUT to archive)")
	// As GitLab Runner's cache commands: each request is bounded
	// (CACHE_REQUEST_TIMEOUT), archiving and extracting are not.
	reqTimeout := fs.Duration("request-timeout", DefaultCacheRequestTimeout, "how long one request to the shared cache may take, its body included")
	timeout := fs.Duration("timeout", 0, "how long the whole command may take (0: no bound)")
	root := fs.String("root", "", "the project directory (default: the working directory)")
	var untracked bool
	key := new(string)
	var maxSize, extractMaxSize int64
	var extractMaxEntries int
	if name == "cache-extractor" {
		extractFlags(fs, &extractMaxSize, &extractMaxEntries)
	}
	if name == "cache-archiver" {
		fs.Var(&paths, "path", "a path or pattern to cache (repeatable)")
		fs.Var(&excludes, "exclude", "a pattern to leave out (repeatable)")
		fs.Var(&headers, "header", "Name: value sent with the upload (repeatable)")
		fs.BoolVar(&untracked, "untracked", false, "add the files git does not track")
		fs.Int64Var(&maxSize, "max-size", 0, "do not upload an archive over this many bytes (0: no cap)")
		key = fs.String("key", "", "the cache's key, written beside the archive (metadata.json)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" {
		fmt.Fprintf(stderr, "%s: --file is required\n", name)
		return 2
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	tr := &cache.Transfer{RequestTimeout: *reqTimeout}
	var err error
	if name == "cache-archiver" {
		h := http.Header{}
		for _, kv := range headers {
			k, v, ok := strings.Cut(kv, ":")
			if !ok {
				fmt.Fprintf(stderr, "%s: --header %q: want Name: value\n", name, kv)
				return 2
			}
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		err = ArchiveCache(ctx, CacheArchiveOptions{
			Root: *root, File: *file, Paths: paths, Exclude: excludes, Untracked: untracked, Key: *key,
			URL: *u, Header: h, MaxSize: maxSize, Transfer: tr,
		}, stdout)
	} else {
		err = ExtractCache(ctx, CacheExtractOptions{Root: *root, File: *file, URL: *u, MaxSize: extractMaxSize, MaxEntries: extractMaxEntries, Transfer: tr}, stdout)
		if errors.Is(err, cache.ErrNotFound) {
			return 1 // its warning is written
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// extractFlags adds the caps of an extraction to fs.
func extractFlags(fs *flag.FlagSet, maxSize *int64, maxEntries *int) {
	fs.Int64Var(maxSize, "extract-max-size", DefaultExtractMaxSize, "refuse an archive that expands to more bytes (0: the default)")
	fs.IntVar(maxEntries, "extract-max-entries", DefaultExtractMaxEntries, "refuse an archive of more entries (0: the default)")
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// artifactsMain runs artifacts-uploader or artifacts-downloader. Both exit
// 1 when they fail: a job's artifacts are not best effort.
func artifactsMain(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "", "the coordinator's URL (required)")
	id := fs.Int64("id", 0, "the job's id (the dependency's, to download) (required)")
	token := fs.String("token", "", "the job token (required; default $CI_JOB_TOKEN)")
	root := fs.String("root", "", "the project directory (default: the working directory)")
	timeout := fs.Duration("timeout", time.Hour, "how long the whole command may take")
	var tlsFiles api.TLSFiles
	fs.StringVar(&tlsFiles.CAFile, "tls-ca-file", "", "PEM CA certificates the coordinator is verified with besides the system's (default $"+api.VarTLSCAFile+")")
	fs.StringVar(&tlsFiles.CertFile, "tls-cert-file", "", "PEM client certificate shown to the coordinator, with --tls-key-file (default $"+api.VarTLSCertFile+")")
	fs.StringVar(&tlsFiles.KeyFile, "tls-key-file", "", "its PEM key (default $"+api.VarTLSKeyFile+")")
	var paths, excludes listFlag
	var untracked bool
	var aname, atype, aformat, expire string
	var extractMaxSize int64
	var extractMaxEntries int
	if name == "artifacts-downloader" {
		fs.StringVar(&aname, "name", "", "the dependency's job name, for messages")
		extractFlags(fs, &extractMaxSize, &extractMaxEntries)
	}
	if name == "artifacts-uploader" {
		fs.Var(&paths, "path", "a path or pattern to upload (repeatable)")
		fs.Var(&excludes, "exclude", "a pattern to leave out (repeatable)")
		fs.BoolVar(&untracked, "untracked", false, "add the files git does not track")
		fs.StringVar(&aname, "name", "", "the archive's name (default artifacts)")
		fs.StringVar(&atype, "artifact-type", "", "archive (default), junit, ...")
		fs.StringVar(&aformat, "artifact-format", "", "zip (default), gzip (each file a gzip member) or raw (one file as it is)")
		fs.StringVar(&expire, "expire-in", "", "how long the coordinator keeps them (default: the job's)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *token == "" {
		*token = os.Getenv("CI_JOB_TOKEN")
	}
	if *base == "" || *id <= 0 || *token == "" {
		fmt.Fprintf(stderr, "%s: --url, --id and --token are required\n", name)
		return 2
	}
	// The job's file variables: the coordinator's TLS as the runner has it.
	tlsFiles.CAFile = cmp.Or(tlsFiles.CAFile, os.Getenv(api.VarTLSCAFile))
	if tlsFiles.CertFile == "" && tlsFiles.KeyFile == "" {
		tlsFiles.CertFile, tlsFiles.KeyFile = os.Getenv(api.VarTLSCertFile), os.Getenv(api.VarTLSKeyFile)
	}
	tlsCfg, err := api.ClientTLS(tlsFiles)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	client := newHTTPClient(tlsCfg)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if name == "artifacts-uploader" {
		err = UploadArtifacts(ctx, ArtifactsUploadOptions{
			URL: *base, ID: *id, Token: *token, Root: *root, Paths: paths, Exclude: excludes, Untracked: untracked,
			Name: aname, Type: atype, Format: aformat, ExpireIn: expire, Client: client,
		}, stdout)
	} else {
		err = DownloadArtifacts(ctx, ArtifactsDownloadOptions{
			URL: *base, ID: *id, Name: aname, Token: *token, Root: *root,
			MaxSize: extractMaxSize, MaxEntries: extractMaxEntries, Client: client,
		}, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
