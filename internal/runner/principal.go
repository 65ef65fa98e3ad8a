package runner

import (
	"context"
	"time"
)

// Principal is who sent a request, as the TTFT floor (floor.go) sees it. ID tells
// principals apart: a principal never needs protecting from what it sent itself. TTFTFloor
// is its floor; 0 turns the floor off for it.
type Principal struct {
	ID        string
	TTFTFloor time.Duration
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p, for Generate's TTFT floor.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf returns the principal WithPrincipal put on ctx.
func principalOf(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
