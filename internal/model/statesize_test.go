package model_test

import (
	"testing"

	"stockpot/internal/kernels"
	"stockpot/internal/model"
)

func TestStateEncodedBytes(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	m, err := model.Load(hybridFile(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewState().AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config().StateEncodedBytes(); got != len(b) {
		t.Errorf("StateEncodedBytes %d, AppendBinary wrote %d", got, len(b))
	}
}
