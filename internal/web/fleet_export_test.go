package web

import "context"

// SetWhatIfHook makes h run before each what-if's simulations, with
// their context and the page's simulation turn taken.
func SetWhatIfHook(f *FleetPage, h func(ctx context.Context)) { f.whatIfHook = h }
