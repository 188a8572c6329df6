// Package fleettest holds helpers for the tests of fleet providers.
package fleettest

import (
	"testing"

	"github.com/drover-ci/drover/internal/fleet"
)

// States calls p.Update once and returns the state it reports for each
// instance, by id; an error from Update fails the test.
func States(t testing.TB, p fleet.Provider) map[string]fleet.State {
	t.Helper()
	got := map[string]fleet.State{}
	if err := p.Update(t.Context(), func(id string, st fleet.State) { got[id] = st }); err != nil {
		t.Fatalf("Update = %v", err)
	}
	return got
}
