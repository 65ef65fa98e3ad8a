package synth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/gguf"
)

// TestWriteAll writes presets into the directory $SYNTH_OUT for checking
// files by hand, as NAME.TYPE.gguf with seed 1:
//
//	SYNTH_OUT=/tmp/m SYNTH_TYPES=F32,Q4_K SYNTH_PRESETS=tiny-kquant go test -run WriteAll
//
// SYNTH_TYPES defaults to F32 and SYNTH_PRESETS to every preset.
func TestWriteAll(t *testing.T) {
	dir := os.Getenv("SYNTH_OUT")
	if dir == "" {
		t.Skip("SYNTH_OUT not set")
	}
	byName := map[string]gguf.Type{}
	for ft := range fileTypes {
		byName[ft.String()] = ft
	}
	types := []gguf.Type{gguf.TypeF32}
	if s := os.Getenv("SYNTH_TYPES"); s != "" {
		types = nil
		for _, n := range strings.Split(s, ",") {
			ft, ok := byName[strings.ToUpper(n)]
			if !ok {
				t.Fatalf("unknown type %q", n)
			}
			types = append(types, ft)
		}
	}
	names := os.Getenv("SYNTH_PRESETS")
	for _, p := range Presets() {
		if names != "" && !strings.Contains(","+names+",", ","+p.Name+",") {
			continue
		}
		for _, ft := range types {
			t0 := time.Now()
			path := filepath.Join(dir, p.Name+"."+ft.String()+".gguf")
			if err := WriteFile(p.Name, Options{Seed: 1, Type: ft}, path); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s: %v", p.Name, ft, time.Since(t0))
		}
	}
}
