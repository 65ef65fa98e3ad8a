package memstore_test

import (
	"testing"
	"time"

	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

func TestConformance(t *testing.T) {
	tiertest.RunOptions(t, func(t *testing.T) tier.Store { return memstore.New() }, tiertest.Options{
		Pins: func(t *testing.T, _ int64, now func() time.Time) tier.Store { return memstore.NewWithClock(now) },
	})
}
