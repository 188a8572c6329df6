package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis layout, under the configured prefix:
//
//	<prefix>job:<id>   hash: data (the record's JSON) plus the fields the
//	                   scripts change, which win over data: owner,
//	                   version, state, retries, health, health_ms,
//	                   updated, updated_ms
//	<prefix>jobs       set of every job id with a record
//	<prefix>health     sorted set of running and delivering job ids by
//	                   health_ms
//
// Times are RFC 3339 strings with nanoseconds, and Unix milliseconds where
// a script compares them (Lua numbers are doubles: milliseconds fit
// exactly, nanoseconds do not).

// saveScript upserts a record if the caller owns it (or nobody does) and
// the version matches; it returns {status, detail}.
const saveScript = `
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'none' and t ~= 'hash' then return {'wrongtype', t} end
local cur = redis.call('HMGET', KEYS[1], 'owner', 'version')
local ver = 0
if cur[1] then
  if cur[1] ~= ARGV[2] then return {'notowner', cur[1]} end
  ver = tonumber(cur[2]) or 0
  if ARGV[3] ~= '0' and tonumber(ARGV[3]) ~= ver then return {'conflict', tostring(ver)} end
end
ver = ver + 1
redis.call('HSET', KEYS[1], 'data', ARGV[4], 'owner', ARGV[2], 'version', ver, 'state', ARGV[5],
  'health', ARGV[6], 'health_ms', ARGV[7], 'updated', ARGV[8], 'updated_ms', ARGV[9], 'retries', ARGV[10])
redis.call('SADD', KEYS[2], ARGV[1])
if ARGV[5] == 'running' or ARGV[5] == 'delivering' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return {'ok', tostring(ver)}
`

// heartbeatScript sets the health time if the caller owns the record.
const heartbeatScript = `
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return {'notfound', ''} end
if t ~= 'hash' then return {'wrongtype', t} end
local cur = redis.call('HMGET', KEYS[1], 'owner', 'state')
if cur[1] ~= ARGV[2] then return {'notowner', tostring(cur[1])} end
redis.call('HSET', KEYS[1], 'health', ARGV[3], 'health_ms', ARGV[4])
if cur[2] == 'running' or cur[2] == 'delivering' then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1]) end
return {'ok', ''}
`

// claimScript takes one job if it is still running (or delivering its
// final update) and its health is still older than the cutoff, and
// returns the claimed hash (HGETALL form) or an empty array. Two managers
// racing for a job both run it; the second finds the health the first
// just wrote and gets nothing.
const claimScript = `
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return {} end
if tonumber(score) >= tonumber(ARGV[3]) then return {} end
local state = redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' and state ~= 'delivering' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'health', ARGV[4], 'health_ms', ARGV[5], 'updated', ARGV[4], 'updated_ms', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'retries', 1)
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
return redis.call('HGETALL', KEYS[1])
`

// cleanupScript removes a record if it is still finished or stale, so
// that a heartbeat from another manager between List and removal keeps
// the record.
const cleanupScript = `
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end
local f = redis.call('HMGET', KEYS[1], 'state', 'updated_ms', 'health_ms')
local last = math.max(tonumber(f[2]) or 0, tonumber(f[3]) or 0)
if f[1] ~= 'finished' and last >= tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`

type redisStore struct {
	c      *redis.Client
	prefix string
	opts   Options

	save, heartbeat, claim, cleanup *redis.Script
}

func openRedis(ctx context.Context, c RedisConfig, opts Options) (*redisStore, error) {
	ro, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, invalidf("url: %v", err)
	}
	// Fail fast when Redis is away (the manager retries with backoff)
	// unless the URL says otherwise, and leave retrying to the caller.
	q := urlQuery(c.URL)
	if !q.Has("dial_timeout") {
		ro.DialTimeout = opts.Timeout
	}
	if !q.Has("read_timeout") {
		ro.ReadTimeout = opts.Timeout
	}
	if !q.Has("write_timeout") {
		ro.WriteTimeout = opts.Timeout
	}
	if !q.Has("pool_timeout") {
		ro.PoolTimeout = opts.Timeout
	}
	if !q.Has("max_retries") {
		ro.MaxRetries = -1
	}
	ro.DialerRetries = 1 // go-redis dials 5 times by default
	ro.ContextTimeoutEnabled = true
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	s := &redisStore{
		c:         redis.NewClient(ro),
		prefix:    prefix,
		opts:      opts,
		save:      redis.NewScript(saveScript),
		heartbeat: redis.NewScript(heartbeatScript),
		claim:     redis.NewScript(claimScript),
		cleanup:   redis.NewScript(cleanupScript),
	}
	if err := s.c.Ping(ctx).Err(); err != nil {
		s.c.Close()
		return nil, fmt.Errorf("ping %s: %w", ro.Addr, err)
	}
	return s, nil
}

func urlQuery(raw string) url.Values {
	u, err := url.Parse(raw)
	if err != nil {
		return url.Values{}
	}
	return u.Query()
}

func (s *redisStore) key(jobID int64) string { return s.prefix + "job:" + strconv.FormatInt(jobID, 10) }
func (s *redisStore) idsKey() string         { return s.prefix + "jobs" }
func (s *redisStore) healthKey() string      { return s.prefix + "health" }

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
func msTime(t time.Time) string  { return strconv.FormatInt(t.UnixMilli(), 10) }

// status reads the {status, detail} reply of saveScript and
// heartbeatScript.
func status(v any) (string, string, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", "", fmt.Errorf("unexpected script reply %v", v)
	}
	st, _ := a[0].(string)
	detail, _ := a[1].(string)
	return st, detail, nil
}

func (s *redisStore) Save(ctx context.Context, r *Record) error {
	data, err := encodeRecord(r)
	if err != nil {
		return err
	}
	id := strconv.FormatInt(r.JobID, 10)
	keys := []string{s.key(r.JobID), s.idsKey(), s.healthKey()}
	args := []any{id, r.Owner, strconv.FormatInt(r.Version, 10), data, r.State,
		fmtTime(r.HealthAt), msTime(r.HealthAt), fmtTime(r.UpdatedAt), msTime(r.UpdatedAt), strconv.Itoa(r.Retries)}
	for attempt := 0; ; attempt++ {
		v, err := s.save.Run(ctx, s.c, keys, args...).Result()
		if err != nil {
			return err
		}
		st, detail, err := status(v)
		if err != nil {
			return err
		}
		switch st {
		case "ok":
			r.Version, err = strconv.ParseInt(detail, 10, 64)
			return err
		case "notowner":
			return fmt.Errorf("%w: held by %s", ErrNotOwner, detail)
		case "conflict":
			return fmt.Errorf("%w: stored version %s, record version %d", ErrConflict, detail, r.Version)
		case "wrongtype":
			if attempt > 0 {
				return fmt.Errorf("%s is a %s, not a hash", keys[0], detail)
			}
			// A key of the wrong type is a corrupt record: move it aside
			// and write the record in its place.
			if err := s.moveAside(ctx, r.JobID, corruptf("%s is a %s, not a hash", keys[0], detail)); !errors.Is(err, ErrCorrupt) {
				return err
			}
		default:
			return fmt.Errorf("unexpected script reply %v", v)
		}
	}
}

func (s *redisStore) Heartbeat(ctx context.Context, jobID int64, owner string, now time.Time) error {
	v, err := s.heartbeat.Run(ctx, s.c, []string{s.key(jobID), s.healthKey()},
		strconv.FormatInt(jobID, 10), owner, fmtTime(now), msTime(now)).Result()
	if err != nil {
		return err
	}
	st, detail, err := status(v)
	if err != nil {
		return err
	}
	switch st {
	case "ok":
		return nil
	case "notfound":
		return ErrNotFound
	case "notowner":
		return fmt.Errorf("%w: held by %s", ErrNotOwner, detail)
	case "wrongtype":
		return s.moveAside(ctx, jobID, corruptf("%s is a %s, not a hash", s.key(jobID), detail))
	}
	return fmt.Errorf("unexpected script reply %v", v)
}

func (s *redisStore) Get(ctx context.Context, jobID int64) (*Record, error) {
	h, err := s.c.HGetAll(ctx, s.key(jobID)).Result()
	if err != nil {
		if isWrongType(err) {
			return nil, s.moveAside(ctx, jobID, corruptf("%s: %v", s.key(jobID), err))
		}
		return nil, err
	}
	if len(h) == 0 {
		return nil, ErrNotFound
	}
	r, err := decodeHash(jobID, h)
	if err != nil {
		return nil, s.moveAside(ctx, jobID, err)
	}
	return r, nil
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// decodeHash turns a record hash into a Record; the script-maintained
// fields win over the JSON. Errors wrap ErrCorrupt.
func decodeHash(jobID int64, h map[string]string) (*Record, error) {
	r, err := decodeRecord([]byte(h["data"]))
	if err != nil {
		return nil, err
	}
	if r.JobID != jobID {
		return nil, corruptf("key of job %d holds job %d", jobID, r.JobID)
	}
	var bad []string
	num := func(field string) int64 {
		n, err := strconv.ParseInt(h[field], 10, 64)
		if err != nil || n < 0 {
			bad = append(bad, field)
		}
		return n
	}
	tm := func(field string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, h[field])
		if err != nil {
			bad = append(bad, field)
		}
		return t
	}
	r.Owner = h["owner"]
	r.State = h["state"]
	r.Version = num("version")
	retries := num("retries")
	r.HealthAt = tm("health")
	r.UpdatedAt = tm("updated")
	if r.State == "" {
		bad = append(bad, "state")
	}
	if retries > int64(^uint32(0)>>1) {
		bad = append(bad, "retries")
	}
	r.Retries = int(retries)
	if len(bad) > 0 {
		return nil, corruptf("bad or missing fields %s", strings.Join(bad, ", "))
	}
	return r, nil
}

// moveAside renames a corrupt record's key to <key>:corrupt, drops the
// job from the indexes and reports it. It returns the error to give the
// caller, which wraps ErrCorrupt when the move worked.
func (s *redisStore) moveAside(ctx context.Context, jobID int64, cause error) error {
	key := s.key(jobID)
	aside := key + ":" + CorruptSuffix
	id := strconv.FormatInt(jobID, 10)
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Rename(ctx, key, aside)
		p.SRem(ctx, s.idsKey(), id)
		p.ZRem(ctx, s.healthKey(), id)
		return nil
	})
	if err != nil && !strings.Contains(err.Error(), "no such key") {
		return fmt.Errorf("%s: %v; moving it aside failed: %w", key, cause, err)
	}
	s.opts.Logger.Error("corrupt job record moved aside", "key", key, "moved_to", aside, "job_id", jobID, "err", cause)
	s.opts.OnCorrupt(key, jobID, cause)
	return fmt.Errorf("%s (moved to %s): %w", key, aside, cause)
}

// ids returns the job ids in the id set, sorted, dropping members that
// are not job ids.
func (s *redisStore) ids(ctx context.Context) ([]int64, error) {
	members, err := s.c.SMembers(ctx, s.idsKey()).Result()
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil || id <= 0 {
			s.c.SRem(ctx, s.idsKey(), m)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (s *redisStore) List(ctx context.Context) ([]*Record, error) {
	ids, err := s.ids(ctx)
	if err != nil {
		return nil, err
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.key(id))
		}
		return nil
	})
	if err != nil && !isWrongType(err) {
		return nil, err
	}
	out := make([]*Record, 0, len(ids))
	for i, id := range ids {
		h, err := cmds[i].Result()
		switch {
		case isWrongType(err):
			s.moveAside(ctx, id, corruptf("%s: %v", s.key(id), err))
			continue
		case err != nil:
			return nil, err
		case len(h) == 0:
			// Removed between SMEMBERS and HGETALL, or a stale member.
			s.c.SRem(ctx, s.idsKey(), strconv.FormatInt(id, 10))
			continue
		}
		r, err := decodeHash(id, h)
		if err != nil {
			s.moveAside(ctx, id, err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *redisStore) ClaimStale(ctx context.Context, owner string, healthTimeout time.Duration, now time.Time) ([]*Record, error) {
	cutoff := msTime(now.Add(-healthTimeout))
	members, err := s.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.healthKey(), Start: "-inf", Stop: "(" + cutoff, ByScore: true}).Result()
	if err != nil {
		return nil, err
	}
	var claimed []*Record
	for _, m := range members {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil || id <= 0 {
			s.c.ZRem(ctx, s.healthKey(), m)
			continue
		}
		v, err := s.claim.Run(ctx, s.c, []string{s.key(id), s.healthKey()}, m, owner, cutoff, fmtTime(now), msTime(now)).Slice()
		if err != nil {
			return claimed, err
		}
		if len(v) == 0 {
			continue // not stale any more, or taken by another manager
		}
		h := make(map[string]string, len(v)/2)
		for i := 0; i+1 < len(v); i += 2 {
			k, _ := v[i].(string)
			val, _ := v[i+1].(string)
			h[k] = val
		}
		r, err := decodeHash(id, h)
		if err != nil {
			s.moveAside(ctx, id, err)
			continue
		}
		claimed = append(claimed, r)
	}
	slices.SortFunc(claimed, func(a, b *Record) int { return cmp.Compare(a.JobID, b.JobID) })
	return claimed, nil
}

func (s *redisStore) Remove(ctx context.Context, jobID int64) error {
	id := strconv.FormatInt(jobID, 10)
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.key(jobID))
		p.SRem(ctx, s.idsKey(), id)
		p.ZRem(ctx, s.healthKey(), id)
		return nil
	})
	return err
}

func (s *redisStore) Cleanup(ctx context.Context, staleTimeout time.Duration, now time.Time) (int, error) {
	all, err := s.List(ctx)
	if err != nil {
		return 0, err
	}
	cutoff := msTime(now.Add(-staleTimeout))
	n := 0
	for _, r := range all {
		if !removable(r, staleTimeout, now) {
			continue
		}
		removed, err := s.cleanup.Run(ctx, s.c, []string{s.key(r.JobID), s.idsKey(), s.healthKey()},
			strconv.FormatInt(r.JobID, 10), cutoff).Int()
		if err != nil {
			return n, err
		}
		n += removed
	}
	return n, nil
}

func (s *redisStore) Close() error { return s.c.Close() }
