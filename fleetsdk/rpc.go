package fleetsdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/rpc"
	"time"

	plugin "github.com/hashicorp/go-plugin"
)

// InstanceGroup is what a plugin implements; the methods have the contract
// the package doc describes.
type InstanceGroup interface {
	Init(ctx context.Context, s Settings) (Info, error)
	Update(ctx context.Context, fn func(id string, st State)) error
	Increase(ctx context.Context, n int) (int, error)
	Decrease(ctx context.Context, ids []string) ([]string, error)
	ConnectInfo(ctx context.Context, id string) (ConnectInfo, error)
	Heartbeat(ctx context.Context, id string) error
	Shutdown(ctx context.Context) error
}

// PluginName is the name the instance group is dispensed under.
const PluginName = "instancegroup"

// ProtocolVersion is the version of the RPC protocol below; drover refuses
// a plugin built against another one.
const ProtocolVersion = 1

// Handshake returns the go-plugin handshake drover and its plugins share.
// The cookie only keeps the program from being run by hand by mistake; it
// is not a security measure.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "DROVER_FLEET_PLUGIN",
		MagicCookieValue: "5f1c0d8e-instancegroup",
	}
}

// Serve runs impl as a plugin until drover kills the process. It is what
// a plugin's main calls; it does not return in a working plugin, and
// exits the process with a message when not started by drover.
func Serve(impl InstanceGroup) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake(),
		Plugins:         PluginSet(impl),
	})
}

// PluginSet returns the go-plugin plugin set holding impl (nil on the
// drover side, which only dispenses).
func PluginSet(impl InstanceGroup) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &rpcPlugin{impl: impl}}
}

// rpcPlugin is the go-plugin glue: Server on the plugin side, Client on
// drover's.
type rpcPlugin struct{ impl InstanceGroup }

func (p *rpcPlugin) Server(*plugin.MuxBroker) (any, error) {
	if p.impl == nil {
		return nil, errors.New("fleetsdk: no InstanceGroup to serve")
	}
	return &RPCServer{impl: p.impl}, nil
}

func (p *rpcPlugin) Client(_ *plugin.MuxBroker, c *rpc.Client) (any, error) {
	return &RPCClient{c: c}, nil
}

// Wire types. Every reply carries its error as text plus a not-found
// flag: net/rpc drops the reply of a method that returns an error, and
// error values do not survive the process boundary.

// CallArgs is the part of every request that carries the caller's deadline.
type CallArgs struct {
	Deadline time.Time // zero: none
}

// ErrReply is the part of every reply that carries the error.
type ErrReply struct {
	Err      string
	NotFound bool
}

func (r *ErrReply) set(err error) {
	if err != nil {
		r.Err = err.Error()
		r.NotFound = errors.Is(err, ErrNotFound)
	}
}

func (r ErrReply) err() error {
	switch {
	case r.Err == "":
		return nil
	case r.NotFound:
		return &remoteError{msg: r.Err, notFound: true}
	default:
		return &remoteError{msg: r.Err}
	}
}

// remoteError is an error the plugin returned.
type remoteError struct {
	msg      string
	notFound bool
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool { return e.notFound && target == ErrNotFound }

// InitArgs and the types below are the RPC messages; they are exported
// only because net/rpc needs them to be.
type InitArgs struct {
	CallArgs
	Name      string
	Config    []byte // JSON
	Connector ConnectorConfig
}

// InitReply is Init's reply.
type InitReply struct {
	ErrReply
	Info Info
}

// UpdateReply is Update's reply.
type UpdateReply struct {
	ErrReply
	Instances []Instance
}

// IncreaseArgs is Increase's request.
type IncreaseArgs struct {
	CallArgs
	N int
}

// IncreaseReply is Increase's reply.
type IncreaseReply struct {
	ErrReply
	N int
}

// DecreaseArgs is Decrease's request.
type DecreaseArgs struct {
	CallArgs
	IDs []string
}

// DecreaseReply is Decrease's reply.
type DecreaseReply struct {
	ErrReply
	IDs []string
}

// IDArgs is the request of the calls about one instance.
type IDArgs struct {
	CallArgs
	ID string
}

// ConnectInfoReply is ConnectInfo's reply.
type ConnectInfoReply struct {
	ErrReply
	Info ConnectInfo
}

// RPCServer serves an InstanceGroup over net/rpc (the plugin side).
type RPCServer struct{ impl InstanceGroup }

func (a CallArgs) context() (context.Context, context.CancelFunc) {
	if a.Deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), a.Deadline)
}

// Init serves InstanceGroup.Init.
func (s *RPCServer) Init(args InitArgs, reply *InitReply) error {
	ctx, cancel := args.context()
	defer cancel()
	st := Settings{Name: args.Name, RawConfig: args.Config, Connector: args.Connector}
	if len(args.Config) > 0 {
		if err := json.Unmarshal(args.Config, &st.Config); err != nil {
			reply.set(fmt.Errorf("fleetsdk: decode plugin_config: %w", err))
			return nil
		}
	}
	info, err := s.impl.Init(ctx, st)
	reply.Info = info
	reply.set(err)
	return nil
}

// Update serves InstanceGroup.Update.
func (s *RPCServer) Update(args CallArgs, reply *UpdateReply) error {
	ctx, cancel := args.context()
	defer cancel()
	err := s.impl.Update(ctx, func(id string, st State) {
		reply.Instances = append(reply.Instances, Instance{ID: id, State: st})
	})
	reply.set(err)
	return nil
}

// Increase serves InstanceGroup.Increase.
func (s *RPCServer) Increase(args IncreaseArgs, reply *IncreaseReply) error {
	ctx, cancel := args.context()
	defer cancel()
	n, err := s.impl.Increase(ctx, args.N)
	reply.N = n
	reply.set(err)
	return nil
}

// Decrease serves InstanceGroup.Decrease.
func (s *RPCServer) Decrease(args DecreaseArgs, reply *DecreaseReply) error {
	ctx, cancel := args.context()
	defer cancel()
	ids, err := s.impl.Decrease(ctx, args.IDs)
	reply.IDs = ids
	reply.set(err)
	return nil
}

// ConnectInfo serves InstanceGroup.ConnectInfo.
func (s *RPCServer) ConnectInfo(args IDArgs, reply *ConnectInfoReply) error {
	ctx, cancel := args.context()
	defer cancel()
	info, err := s.impl.ConnectInfo(ctx, args.ID)
	reply.Info = info
	reply.set(err)
	return nil
}

// Heartbeat serves InstanceGroup.Heartbeat.
func (s *RPCServer) Heartbeat(args IDArgs, reply *ErrReply) error {
	ctx, cancel := args.context()
	defer cancel()
	reply.set(s.impl.Heartbeat(ctx, args.ID))
	return nil
}

// Shutdown serves InstanceGroup.Shutdown.
func (s *RPCServer) Shutdown(args CallArgs, reply *ErrReply) error {
	ctx, cancel := args.context()
	defer cancel()
	reply.set(s.impl.Shutdown(ctx))
	return nil
}

// RPCClient is drover's side: an InstanceGroup whose methods call the
// plugin. A method returns when the plugin answers or ctx is done,
// whichever is first; a plugin that died makes every call fail with
// rpc.ErrShutdown (wrapped).
type RPCClient struct{ c *rpc.Client }

var _ InstanceGroup = (*RPCClient)(nil)

// ErrUnreachable is wrapped around a call that got no answer from the
// plugin: the connection failed or the process is gone (not an error the
// plugin returned, nor the caller's context ending).
var ErrUnreachable = errors.New("plugin unreachable")

// call runs one RPC, giving up when ctx is done, and returns the
// transport error (the plugin's own error is in the reply).
func (c *RPCClient) call(ctx context.Context, method string, args, reply any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	call := c.c.Go("Plugin."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			return fmt.Errorf("plugin call %s: %w: %w", method, ErrUnreachable, call.Error)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("plugin call %s: %w", method, ctx.Err())
	}
}

func callArgs(ctx context.Context) CallArgs {
	dl, _ := ctx.Deadline()
	return CallArgs{Deadline: dl}
}

// Init calls the plugin's Init.
func (c *RPCClient) Init(ctx context.Context, s Settings) (Info, error) {
	raw := s.RawConfig
	if raw == nil && s.Config != nil {
		var err error
		if raw, err = json.Marshal(s.Config); err != nil {
			return Info{}, fmt.Errorf("fleetsdk: encode plugin_config: %w", err)
		}
	}
	var reply InitReply
	if err := c.call(ctx, "Init", InitArgs{CallArgs: callArgs(ctx), Name: s.Name, Config: raw, Connector: s.Connector}, &reply); err != nil {
		return Info{}, err
	}
	return reply.Info, reply.err()
}

// Update calls the plugin's Update and then fn for each instance.
func (c *RPCClient) Update(ctx context.Context, fn func(id string, st State)) error {
	var reply UpdateReply
	if err := c.call(ctx, "Update", callArgs(ctx), &reply); err != nil {
		return err
	}
	for _, in := range reply.Instances {
		fn(in.ID, in.State)
	}
	return reply.err()
}

// Increase calls the plugin's Increase.
func (c *RPCClient) Increase(ctx context.Context, n int) (int, error) {
	var reply IncreaseReply
	if err := c.call(ctx, "Increase", IncreaseArgs{CallArgs: callArgs(ctx), N: n}, &reply); err != nil {
		return 0, err
	}
	return reply.N, reply.err()
}

// Decrease calls the plugin's Decrease.
func (c *RPCClient) Decrease(ctx context.Context, ids []string) ([]string, error) {
	var reply DecreaseReply
	if err := c.call(ctx, "Decrease", DecreaseArgs{CallArgs: callArgs(ctx), IDs: ids}, &reply); err != nil {
		return nil, err
	}
	return reply.IDs, reply.err()
}

// ConnectInfo calls the plugin's ConnectInfo.
func (c *RPCClient) ConnectInfo(ctx context.Context, id string) (ConnectInfo, error) {
	var reply ConnectInfoReply
	if err := c.call(ctx, "ConnectInfo", IDArgs{CallArgs: callArgs(ctx), ID: id}, &reply); err != nil {
		return ConnectInfo{}, err
	}
	return reply.Info, reply.err()
}

// Heartbeat calls the plugin's Heartbeat.
func (c *RPCClient) Heartbeat(ctx context.Context, id string) error {
	var reply ErrReply
	if err := c.call(ctx, "Heartbeat", IDArgs{CallArgs: callArgs(ctx), ID: id}, &reply); err != nil {
		return err
	}
	return reply.err()
}

// Shutdown calls the plugin's Shutdown.
func (c *RPCClient) Shutdown(ctx context.Context) error {
	var reply ErrReply
	if err := c.call(ctx, "Shutdown", callArgs(ctx), &reply); err != nil {
		return err
	}
	return reply.err()
}
