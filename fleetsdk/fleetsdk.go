// Package fleetsdk is what the author of an out-of-process drover fleet
// provider imports: a cloud's instance group (AWS, GCP, Azure, ...) becomes
// a program that drover starts and talks to, without changing drover.
//
// A plugin implements InstanceGroup and calls Serve from main:
//
//	func main() {
//		fleetsdk.Serve(&myGroup{})
//	}
//
// drover starts the program (`plugin = "/path/to/program"` in
// [runners.autoscaler]), checks the handshake, and calls the methods over
// net/rpc through github.com/hashicorp/go-plugin. The program's stderr ends
// up in drover's log; its stdout is not used.
//
// # Contract
//
// The methods mean what drover's own providers' do: Init is called once,
// first, with [runners.autoscaler.plugin_config]; Update reports every
// instance the group has (also those an earlier drover process created),
// and an instance that is gone reported once as StateDeleted; Increase asks
// for n more and returns how many were requested; Decrease asks for the
// removal of ids and returns those whose removal was requested; Heartbeat
// returns an error for an instance that does not answer; Shutdown releases
// the plugin's own resources, never the instances, and the process is then
// killed. Return an error wrapping ErrNotFound for an unknown instance.
//
// A method's ctx carries the caller's deadline; cancellation on drover's
// side is not forwarded (drover stops waiting, the call goes on).
//
// This package does not depend on drover's internal packages, so it can
// be imported from any module.
package fleetsdk

import (
	"encoding/json"
	"errors"
	"time"
)

// State is the lifecycle state of one instance.
type State string

// Instance states; see drover's fleet package for their meaning.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateDeleting State = "deleting"
	StateDeleted  State = "deleted"
	StateTimeout  State = "timeout"
)

// ErrNotFound is what a plugin wraps for an instance it does not know; it
// crosses the process boundary and is seen by drover as its own
// not-found error.
var ErrNotFound = errors.New("instance not found")

// Settings is what Init gets.
type Settings struct {
	// Name identifies the owner (the runner); use it to tell this group's
	// instances from anybody else's.
	Name string
	// Config is [runners.autoscaler.plugin_config] as JSON decodes it:
	// numbers are float64. Use DecodeConfig to fill a struct instead.
	Config map[string]any
	// RawConfig is the same configuration as JSON.
	RawConfig json.RawMessage
	// Connector is [runners.autoscaler.connector_config].
	Connector ConnectorConfig
}

// DecodeConfig decodes the plugin configuration into v (a pointer), as
// encoding/json does.
func (s Settings) DecodeConfig(v any) error {
	if len(s.RawConfig) == 0 {
		return nil
	}
	return json.Unmarshal(s.RawConfig, v)
}

// ConnectorConfig is [runners.autoscaler.connector_config].
type ConnectorConfig struct {
	OS                   string
	Arch                 string
	Protocol             string
	ProtocolPort         int
	Username             string
	Password             string
	KeyPath              string
	UseStaticCredentials bool
	Keepalive            time.Duration
	Timeout              time.Duration
	UseExternalAddr      bool
}

// Info describes the group after Init.
type Info struct {
	ID        string // unique id of the group, e.g. "aws/runner-abc"
	MaxSize   int    // most instances; 0 = no limit
	Version   string
	BuildInfo string
}

// ConnectInfo tells how to reach one instance.
type ConnectInfo struct {
	ID           string
	OS           string
	Arch         string
	Protocol     string // ssh
	Username     string
	Password     string
	Key          []byte // private key, PEM
	InternalAddr string // host:port
	ExternalAddr string // host:port
	Expires      *time.Time
}

// Instance is one entry of an Update.
type Instance struct {
	ID    string
	State State
}
