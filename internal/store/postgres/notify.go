package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/store"
)

// queueChannel is the NOTIFY channel on which a job entering the queue is
// announced, in the same transaction that queues it: the notification is
// delivered when, and only if, the job is committed.
const queueChannel = "drover_queue"

// queueNote is a notification's payload (JSON; PostgreSQL caps payloads at
// 8000 bytes, which only absurd tag lists could reach).
type queueNote struct {
	Origin   string   `json:"o"` // the store that queued the job
	ID       int64    `json:"id"`
	Tags     []string `json:"t"`
	Image    bool     `json:"i"`
	Services bool     `json:"s"`
	// Changed marks a job change (AnnounceJobChange), not a queued job.
	Changed bool `json:"c,omitempty"`
}

// notifyJobSQL is the payload of job j (a row of jobs) for CreateJob, built
// in the statement because the id is assigned there; $origin and $services
// are parameters.
func notifyJobSQL(origin, services string) string {
	return `pg_notify('` + queueChannel + `', json_build_object('o', ` + origin + `::text, 'id', j.id, 't', j.tags, 'i', j.image <> '', 's', ` + services + `::boolean)::text)`
}

// notifyQueued announces j, which tx has just queued.
func (s *Store) notifyQueued(ctx context.Context, tx pgx.Tx, j *store.Job) error {
	b, err := json.Marshal(queueNote{Origin: s.origin, ID: j.ID, Tags: nonNil(j.Tags), Image: j.Image != "", Services: len(j.Spec.Services) > 0})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, queueChannel, string(b))
	return err
}

// ListenQueue implements store.QueueListener on a connection of its own
// (LISTEN holds a session), outside the pool. Notifications this store
// sent itself are skipped: its coordinator woke its own waiters already.
func (s *Store) ListenQueue(ctx context.Context, ready chan<- struct{}, fn func(store.QueueEvent)) error {
	backoff := 50 * time.Millisecond
	connected := false
	for {
		err := s.listenOnce(ctx, func() {
			if !connected {
				connected = true
				if ready != nil {
					close(ready)
				}
				return
			}
			// Back after a loss: whatever was queued meanwhile was not
			// announced to us.
			s.log.Info("queue notifications: listening again")
			fn(store.QueueEvent{Resync: true})
			backoff = 50 * time.Millisecond
		}, fn)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("queue notifications: connection lost, reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, up func(), fn func(store.QueueEvent)) error {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return s.fail(ctx, "queue notifications: connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+queueChannel); err != nil {
		return s.fail(ctx, "queue notifications: listen", err)
	}
	up()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return s.fail(ctx, "queue notifications: wait", err)
		}
		var note queueNote
		if err := json.Unmarshal([]byte(n.Payload), &note); err != nil {
			s.log.Warn("queue notifications: bad payload", "payload", n.Payload, "err", err)
			continue
		}
		if note.Origin == s.origin {
			continue
		}
		s.notes.Add(1)
		if note.Changed {
			fn(store.QueueEvent{JobID: note.ID, Changed: true})
			continue
		}
		fn(store.QueueEvent{JobID: note.ID, Tags: note.Tags, Image: note.Image, Services: note.Services})
	}
}

// AnnounceJobChange implements store.JobAnnouncer on the queue channel.
func (s *Store) AnnounceJobChange(ctx context.Context, id int64) error {
	b, err := json.Marshal(queueNote{Origin: s.origin, ID: id, Changed: true})
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, queueChannel, string(b))
	if err != nil {
		return s.fail(ctx, "announce job change", err)
	}
	return nil
}

var (
	_ store.QueueListener = (*Store)(nil)
	_ store.JobAnnouncer  = (*Store)(nil)
)
