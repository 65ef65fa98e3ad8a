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
func TestAsmgenK(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	out := filepath.Join(t.TempDir(), "matmul_k_amd64.s")
	cmd := exec.Command(goBin, "run", "asmgen_k.go", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run asmgen_k.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("matmul_k_amd64.s")
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
				t.Fatalf("matmul_k_amd64.s is not asmgen_k.go's output (run go generate); first difference at line %d:\ngenerated: %q\ncommitted: %q", i+1, g, w)
			}
		}
	}
}
