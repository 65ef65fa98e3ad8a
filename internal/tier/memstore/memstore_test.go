package memstore_test

import (
	"testing"

	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

func TestConformance(t *testing.T) {
	tiertest.Run(t, func(t *testing.T) tier.Store { return memstore.New() })
}
