// Package fleet defines how drover talks to a group of machines it can
// grow and shrink: a Provider creates and deletes instances and tells how
// to reach them. The autoscaler (internal/autoscale) decides how many;
// the providers (fleet/docker, fleet/static, fleet/sim, fleet/plugin) only
// carry out what it decided.
//
// The shape follows GitLab's fleeting InstanceGroup, made idiomatic: every
// call takes a context, and Update reports every instance the provider
// knows, so the caller can reconcile its own view with the truth.
package fleet

import (
	"context"
	"errors"
	"time"
)

// State is the lifecycle state of one instance as the provider sees it.
type State string

// Instance states.
const (
	// StateCreating: asked for, not yet running.
	StateCreating State = "creating"
	// StateRunning: up; whether it is ready for jobs is the caller's call
	// (it may run an instance_ready_command first).
	StateRunning State = "running"
	// StateDeleting: removal requested, not finished.
	StateDeleting State = "deleting"
	// StateDeleted: gone. Reported once; later Updates leave it out.
	StateDeleted State = "deleted"
	// StateTimeout: the provider gave up waiting for it (failed to boot).
	StateTimeout State = "timeout"
	// StateSuspending, StateSuspended and StateResuming come from fleeting
	// plugins that can suspend instances. Drover never asks for it; an
	// instance in one of them is not running, so it takes no jobs.
	StateSuspending State = "suspending"
	StateSuspended  State = "suspended"
	StateResuming   State = "resuming"
)

// Settings is what Init gets: who the group belongs to and the
// provider-specific configuration ([runners.autoscaler.plugin_config]).
type Settings struct {
	// Name identifies the owner (runner short token); providers use it to
	// tell their own instances from anybody else's (names, labels).
	Name string
	// Config is the provider-specific configuration, decoded from TOML.
	Config map[string]any
	// Connector is the default connection configuration
	// ([runners.autoscaler.connector_config]).
	Connector ConnectorConfig
}

// ConnectorConfig is [runners.autoscaler.connector_config].
// The credentials are used for an instance whose ConnectInfo has none, or
// for every instance when UseStaticCredentials is set.
type ConnectorConfig struct {
	OS                   string        // the instances' operating system, for plugins that ask (linux)
	Arch                 string        // the instances' architecture, for plugins that ask (amd64)
	Protocol             string        // ssh (only ssh is supported)
	ProtocolPort         int           // default 22
	Username             string        // SSH user
	Password             string        // SSH password
	KeyPath              string        // file of the SSH private key (PEM)
	UseStaticCredentials bool          // use these credentials even when the instance has its own
	Keepalive            time.Duration // between SSH keep-alive requests
	Timeout              time.Duration // bounds the SSH connect and a keep-alive's answer
	UseExternalAddr      bool          // dial ConnectInfo.ExternalAddr instead of InternalAddr
}

// Info describes a provider after Init.
type Info struct {
	ID        string // unique id of the group, e.g. "docker/runner-abc"
	MaxSize   int    // most instances the provider can hold; 0 = no limit
	Version   string // the provider's (or plugin's) version
	BuildInfo string // the provider's build details (commit, date), for the log
	// Capabilities are what the provider can do beyond the Provider
	// interface, as fleeting plugins advertise them ("suspend_resume").
	Capabilities []string
}

// ConnectInfo tells how to reach one instance.
// Credentials left empty are taken from the ConnectorConfig.
type ConnectInfo struct {
	ID           string // the instance's id in the group
	OS           string // the instance's operating system (linux)
	Arch         string // the instance's architecture (amd64)
	Protocol     string // ssh
	Username     string // SSH user
	Password     string // SSH password
	Key          []byte // private key, PEM
	InternalAddr string // host:port
	ExternalAddr string // host:port
	// Expires is when the credentials stop working (short-lived ones a
	// plugin hands out): the pool asks again before then. Nil: never.
	Expires *time.Time
}

// Addr returns the address to dial: the external one when useExternal is
// set and known, otherwise the internal one.
func (c ConnectInfo) Addr(useExternal bool) string {
	if useExternal && c.ExternalAddr != "" {
		return c.ExternalAddr
	}
	if c.InternalAddr != "" {
		return c.InternalAddr
	}
	return c.ExternalAddr
}

// ErrNotFound is returned (wrapped) for an instance the provider does not
// know.
var ErrNotFound = errors.New("instance not found")

// Provider is an instance group.
type Provider interface {
	// Init prepares the provider; it is called once, before anything else.
	Init(ctx context.Context, s Settings) (Info, error)
	// Update calls fn for every instance the provider knows, with its
	// current state. It is called periodically by the autoscaler.
	Update(ctx context.Context, fn func(id string, st State)) error
	// Increase asks for n more instances and returns how many it
	// successfully requested (which may be fewer, with an error).
	Increase(ctx context.Context, n int) (int, error)
	// Decrease asks for the removal of the given instances and returns the
	// ids whose removal it successfully requested.
	Decrease(ctx context.Context, ids []string) ([]string, error)
	// ConnectInfo tells how to reach a running instance.
	ConnectInfo(ctx context.Context, id string) (ConnectInfo, error)
	// Heartbeat checks that an instance is alive; an error counts toward
	// failure_threshold.
	Heartbeat(ctx context.Context, id string) error
	// Shutdown releases the provider's own resources (not the instances).
	Shutdown(ctx context.Context) error
}
