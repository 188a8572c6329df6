package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
)

// Secrets at rest.
//
// A job's variables (its own, its image's and its services') are sealed
// with the coordinator's secret key (package secretbox, AES-256-GCM) into
// JobSpec.Sealed when the job is stored (createJob), so the database (the
// SQLite file and its WAL, a backup, a PostgreSQL dump) holds none of them
// in the clear. They are opened only to build the payload for the runner
// that claims the job (claimJob); the admin API never shows variables.
// Jobs stored before variables were sealed keep them in the clear and are
// served as they are.
//
// The key is Config.SecretKey (DROVER_SECRET_KEY), else the key file
// (DataDir/secret-key, created on first start). The store records the id
// of the key (settingKeyID; never the key): a coordinator started with
// another key refuses to start, whether it is alone on an SQLite file or
// one of several on a PostgreSQL database, which must all have the same
// key. Rotation: a coordinator given the recorded key as an old key
// (Config.OldSecretKeys: DROVER_SECRET_KEY_OLD, or the key file's name +
// ".old") records its new key instead, seals with the new key from then
// on, and still opens what the old key sealed.

const (
	// variablesPurpose is the purpose job variables are sealed for.
	variablesPurpose = "drover job variables"
	// settingKeyID is the store setting holding the id of the key that
	// seals job variables.
	settingKeyID = "secret_key_id"
)

// sealedVariables is what JobSpec.Sealed holds, opened.
type sealedVariables struct {
	Job      []api.Variable   `json:"job,omitempty"`
	Image    []api.Variable   `json:"image,omitempty"`
	Services [][]api.Variable `json:"services,omitempty"` // by index in JobSpec.Services
}

// openSecrets loads the secret keys and checks the store's key id.
func (c *Coordinator) openSecrets(ctx context.Context) error {
	cfg := c.cfg
	keyFile := cfg.SecretKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "secret-key")
	}
	key, from, created := cfg.SecretKey, "DROVER_SECRET_KEY", false
	if key == nil {
		var err error
		if key, created, err = secretbox.LoadOrCreateKeyFile(keyFile); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		from = keyFile
	}
	old, oldFrom := cfg.OldSecretKeys, "DROVER_SECRET_KEY_OLD"
	if old == nil {
		oldFile := keyFile + ".old"
		k, err := secretbox.ReadKeyFile(oldFile)
		switch {
		case err == nil:
			old, oldFrom = []*secretbox.Key{k}, oldFile
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("coordinator: old key: %w", err)
		}
	}
	c.box = secretbox.NewBox(key, old...)
	if err := c.checkKeyID(ctx, from, old); err != nil {
		if created {
			// A key made for a database sealed with another is of no use;
			// removed, it does not stand in the way of the right one.
			if rerr := os.Remove(keyFile); rerr == nil {
				err = fmt.Errorf("%w (%s, created by this start, was removed again)", err, keyFile)
			}
		}
		return err
	}
	log := c.log.With("key_id", key.ID(), "from", from)
	if created {
		log.Info("secret key created: job variables are sealed with it; keep a copy, without it they cannot be read")
	} else {
		log.Info("secret key")
	}
	if len(old) > 0 {
		c.log.Info("old secret keys open what they sealed", "key_ids", keyIDs(old), "from", oldFrom)
	}
	return nil
}

// checkKeyID compares the key id the store records with the coordinator's
// keys: the same is fine; an old key's is a rotation, and the new key's id
// is recorded; any other refuses the start. A store that keeps no
// settings is not checked.
func (c *Coordinator) checkKeyID(ctx context.Context, from string, old []*secretbox.Key) error {
	if c.settings == nil {
		return nil
	}
	cur := c.box.KeyID()
	for range 3 {
		rec, err := c.settings.SettingOrInit(ctx, settingKeyID, cur)
		if err != nil {
			return fmt.Errorf("coordinator: secret key id from the database: %w", err)
		}
		if rec == cur {
			return nil
		}
		if !c.box.Opens(rec) {
			return c.keyMismatch(rec, from, old)
		}
		swapped, err := c.settings.SwapSetting(ctx, settingKeyID, rec, cur)
		if err != nil {
			return fmt.Errorf("coordinator: record the new secret key id: %w", err)
		}
		if swapped {
			c.log.Warn("secret key rotated: new job variables are sealed with the new key; the old key still opens what it sealed",
				"key_id", cur, "old_key_id", rec)
			return nil
		}
		// Another coordinator changed it in between: look again.
	}
	return errors.New("coordinator: the database's secret key id keeps changing: coordinators on it were given different keys")
}

// keyMismatch is the refusal to start with a key the store's job variables
// were not sealed with.
func (c *Coordinator) keyMismatch(recorded, from string, old []*secretbox.Key) error {
	have := c.box.KeyID()
	if len(old) > 0 {
		have += ", old " + strings.Join(keyIDs(old), ", ")
	}
	what := "start it with the key the database was written with (DROVER_SECRET_KEY, or the secret-key file in the data directory)"
	if c.shared != nil {
		what = "give every coordinator on the database the same DROVER_SECRET_KEY or secret-key file"
	}
	return fmt.Errorf("coordinator: the job variables in the database are sealed with secret key %s, but this coordinator's key is %s (from %s): %s; to change keys, give the database's key as the old one (DROVER_SECRET_KEY_OLD or secret-key.old)",
		recorded, have, from, what)
}

func keyIDs(keys []*secretbox.Key) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	return ids
}

// createJob stores j with its variables sealed.
func (c *Coordinator) createJob(ctx context.Context, j store.Job) (store.Job, error) {
	sealVariables(c.box, &j.Spec)
	return c.st.CreateJob(ctx, j)
}

// sealVariables moves the variables of spec, of its image and of its
// services into spec.Sealed. A spec without variables is left as it is.
func sealVariables(box *secretbox.Box, spec *store.JobSpec) {
	sv := sealedVariables{Job: spec.Variables, Image: spec.Image.Variables}
	some := len(sv.Job) > 0 || len(sv.Image) > 0
	for _, s := range spec.Services {
		some = some || len(s.Variables) > 0
	}
	if !some {
		return
	}
	services := slices.Clone(spec.Services) // the caller's keep their variables
	sv.Services = make([][]api.Variable, len(services))
	for i := range services {
		sv.Services[i], services[i].Variables = services[i].Variables, nil
	}
	b, err := json.Marshal(sv)
	if err != nil {
		panic(err) // plain data: cannot happen
	}
	spec.Sealed = box.Seal(b, variablesPurpose)
	spec.Variables, spec.Image.Variables, spec.Services = nil, nil, services
}

// openVariables puts the variables sealed in spec back in their places. A
// spec with none sealed (none at all, or stored before variables were
// sealed) is left as it is.
func openVariables(box *secretbox.Box, spec *store.JobSpec) error {
	if spec.Sealed == "" {
		return nil
	}
	b, err := box.Open(spec.Sealed, variablesPurpose)
	if err != nil {
		return err
	}
	var sv sealedVariables
	if err := json.Unmarshal(b, &sv); err != nil {
		return fmt.Errorf("sealed variables: %w", err)
	}
	if len(sv.Services) > len(spec.Services) {
		return fmt.Errorf("sealed variables of %d services, the job has %d", len(sv.Services), len(spec.Services))
	}
	services := slices.Clone(spec.Services)
	for i, vs := range sv.Services {
		services[i].Variables = vs
	}
	spec.Variables, spec.Image.Variables, spec.Services, spec.Sealed = sv.Job, sv.Image, services, ""
	return nil
}

// failUnopenable fails pending job j, whose variables do not open (err),
// with data_integrity_failure and a line in its trace saying why: it
// could never be run as submitted.
func (c *Coordinator) failUnopenable(ctx context.Context, j *store.Job, err error) {
	why := "they do not open with its secret key (corrupted or changed)"
	var uk *secretbox.UnknownKeyError
	if errors.As(err, &uk) {
		why = fmt.Sprintf("they were sealed with secret key %s, which this coordinator does not have (give it as DROVER_SECRET_KEY_OLD)", uk.ID)
	}
	c.log.Error("job variables cannot be opened", "job_id", j.ID, "key_id", c.box.KeyID(), "err", err)
	line := "ERROR: Job failed: the coordinator cannot read the job's variables: " + why
	c.endJob(ctx, j.ID, "job failed: its variables cannot be opened", func(cur *store.Job) (store.Status, api.FailureReason, string) {
		if cur.Status != store.StatusPending || cur.Spec.Sealed != j.Spec.Sealed {
			return "", "", ""
		}
		return store.StatusFailed, api.DataIntegrityFailure, line
	})
}
