package local

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/httpserver"
)

// localCoordinator is a coordinator of this process, keeping its data
// under a directory and serving its API on a loopback port, as drover
// local and drover exec run one for the length of the command.
type localCoordinator struct {
	coord *coordinator.Coordinator
	srv   *httpserver.Server
	url   string
	api   *client.Client
}

// startCoordinator starts a coordinator with its data in dataDir; it
// runs until ctx ends, and Close stops serving and closes it.
func startCoordinator(ctx context.Context, logger *slog.Logger, dataDir string) (*localCoordinator, error) {
	coord, err := coordinator.New(ctx, logger.With("component", "coordinator"), coordinator.Config{
		DataDir:         dataDir,
		LongPollTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("start coordinator: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = coord.Close()
		return nil, err
	}
	srv := httpserver.New(coord.Handler(), httpserver.Options{})
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = coord.Run(ctx) }()
	url := "http://" + ln.Addr().String()
	return &localCoordinator{coord: coord, srv: srv, url: url, api: client.New(url, coord.AdminToken(), nil)}, nil
}

// Close stops serving, then closes the coordinator.
func (c *localCoordinator) Close() {
	_ = c.srv.Close()
	_ = c.coord.Close()
}
