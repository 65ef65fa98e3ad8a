package synth

import (
	"os"
	"testing"
	"time"
)

// TestWriteAll writes every preset (F32, seed 1) into the directory
// $SYNTH_OUT, for checking files by hand: SYNTH_OUT=/tmp/m go test -run WriteAll.
func TestWriteAll(t *testing.T) {
	dir := os.Getenv("SYNTH_OUT")
	if dir == "" {
		t.Skip("SYNTH_OUT not set")
	}
	for _, p := range Presets() {
		t0 := time.Now()
		if err := WriteFile(p.Name, Options{Seed: 1}, dir+"/"+p.Name+".gguf"); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v", p.Name, time.Since(t0))
	}
}
