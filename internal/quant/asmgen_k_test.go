package quant

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAsmgenK runs the generator and checks that the committed
// matmul_k_amd64.s is exactly its output, so the two never drift: edit
// asmgen_k.go and run go generate, never the .s by hand.
func TestAsmgenK(t *testing.T) { checkAsmgen(t, "matmul_k_amd64.s", "asmgen_k.go") }

// TestAsmgenPair is TestAsmgenK for asmgen_pair.go and matmul_pair_amd64.s.
func TestAsmgenPair(t *testing.T) {
	checkAsmgen(t, "matmul_pair_amd64.s", "asmgen_pair.go", "asmgen_prefetch.go")
}

// TestAsmgenK512 is TestAsmgenK for asmgen_k512.go and matmul_k512_amd64.s.
func TestAsmgenK512(t *testing.T) {
	checkAsmgen(t, "matmul_k512_amd64.s", "asmgen_k512.go", "asmgen_prefetch.go")
}

// checkAsmgen runs the generator made of the files gens (the program first)
// and compares its output with the committed file.
func checkAsmgen(t *testing.T, file string, gens ...string) {
	gen := gens[0]
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	out := filepath.Join(t.TempDir(), file)
	cmd := exec.Command(goBin, append(append([]string{"run"}, gens...), "-o", out)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run %s: %v\n%s", gen, err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if !bytes.Equal(g, w) || i >= len(gl) || i >= len(wl) {
				t.Fatalf("%s is not %s's output (run go generate); first difference at line %d:\ngenerated: %q\ncommitted: %q", file, gen, i+1, g, w)
			}
		}
	}
}
