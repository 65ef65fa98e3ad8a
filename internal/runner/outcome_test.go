package runner

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"stockpot/internal/api"
	"stockpot/internal/engine"
)

func TestGenOutcome(t *testing.T) {
	done := func(reason string) *engine.Output { return &engine.Output{Done: true, FinishReason: reason} }
	for _, tc := range []struct {
		name                  string
		phase                 genPhase
		final                 *engine.Output
		cancelled, clientDone bool
		finish                string
		err                   error // ErrClientGone, or nil
		status                int   // API status when the error is not ErrClientGone
	}{
		{"stop", genRunning, done(engine.FinishStop), false, false, "stop", nil, 0},
		{"length", genRunning, done(engine.FinishLength), false, false, "length", nil, 0},
		{"the client left as the engine finished", genRunning, done(engine.FinishStop), true, true, "", ErrClientGone, 0},
		{"stopped reading", genGone, done(engine.FinishLength), true, false, "", ErrClientGone, 0},
		{"stopped reading after a cut", genGone, nil, true, false, "", ErrClientGone, 0},
		{"stop string", genCut, done(engine.FinishCancelled), true, false, "stop", nil, 0},
		{"stop string, final raced the cancel", genCut, nil, true, false, "stop", nil, 0},
		{"stop string, then the client left", genCut, done(engine.FinishCancelled), true, true, "", ErrClientGone, 0},
		{"no final message", genRunning, nil, false, false, "", nil, http.StatusInternalServerError},
		{"no final message after a cancel", genRunning, nil, true, false, "", ErrClientGone, 0},
		{"engine cancelled (shutdown)", genRunning, done(engine.FinishCancelled), false, false, "", nil, http.StatusServiceUnavailable},
		{"engine cancelled for us", genRunning, done(engine.FinishCancelled), true, false, "", ErrClientGone, 0},
		{"unknown reason", genRunning, done("weird"), false, false, "", nil, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			finish, err := genOutcome(tc.phase, tc.final, tc.cancelled, tc.clientDone)
			switch {
			case tc.status != 0:
				if err == nil || errors.Is(err, ErrClientGone) || api.AsError(err).Status != tc.status {
					t.Fatalf("have (%q, %v), want an API error with status %d", finish, err, tc.status)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("have (%q, %v), want %v", finish, err, tc.err)
				}
			default:
				if err != nil || finish != tc.finish {
					t.Fatalf("have (%q, %v), want (%q, nil)", finish, err, tc.finish)
				}
			}
		})
	}
}

func TestGenUsage(t *testing.T) {
	u := engine.Usage{PromptTokens: 7, DeviceTokens: 4, ComputedTokens: 3}
	if have := genUsage(&engine.Output{Done: true, Usage: &u}, 7); !reflect.DeepEqual(have, u) {
		t.Fatalf("have %+v, want the engine's %+v", have, u)
	}
	want := engine.Usage{PromptTokens: 7, ComputedTokens: 7}
	for _, final := range []*engine.Output{nil, {Done: true}} {
		if have := genUsage(final, 7); !reflect.DeepEqual(have, want) {
			t.Fatalf("final %+v: have %+v, want %+v", final, have, want)
		}
	}
}
