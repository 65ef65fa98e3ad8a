package llamaref

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// quantizeFTypes are the llama_ftype values (llama.h) Quantize accepts, by
// llama-quantize's names.
var quantizeFTypes = map[string]int{
	"Q4_0": 2, "Q8_0": 7, "Q5_0": 8,
	"Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
}

// quantizeMain is the C driver Quantize builds: llama-quantize's core call
// with its default parameters (no imatrix, no overrides), one thread.
const quantizeMain = `#include <stdio.h>
#include <stdlib.h>
#include "llama.h"
int main(int argc, char **argv) {
	if (argc != 4) { fprintf(stderr, "usage: quantize IN OUT FTYPE\n"); return 2; }
	llama_backend_init();
	llama_model_quantize_params p = llama_model_quantize_default_params();
	p.ftype = (enum llama_ftype)atoi(argv[3]);
	p.nthread = 1;
	uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
	llama_backend_free();
	return rc != 0;
}
`

// quantizeHeaders are the headers llama.h pulls in, by their path in the
// llama.cpp source.
var quantizeHeaders = []string{
	"include/llama.h", "ggml/include/ggml.h", "ggml/include/ggml-cpu.h", "ggml/include/ggml-backend.h",
	"ggml/include/ggml-opt.h", "ggml/include/ggml-alloc.h", "ggml/include/gguf.h",
}

// Quantize writes out, the GGUF that llama-quantize would make from in (an
// F32, F16 or BF16 GGUF) for ftype ("Q4_K_M", "Q5_K_S", "Q6_K", "Q8_0",
// ...; see quantizeFTypes): it calls llama_model_quantize, with
// llama-quantize's default parameters and no importance matrix, in the
// llama.cpp library node-llama-cpp ships (the same build Evaluate runs). The
// small C driver is compiled with the system C compiler (cc) against the
// headers of the source bundle, in a temporary directory, on each call.
//
// When the reference is missing the error wraps ErrNotInstalled.
func Quantize(in, out, ftype string) error {
	ft, ok := quantizeFTypes[ftype]
	if !ok {
		return fmt.Errorf("llamaref: Quantize: unknown file type %q", ftype)
	}
	dir, _, err := locate()
	if err != nil {
		return err
	}
	libs, _ := filepath.Glob(filepath.Join(dir, "node_modules", "@node-llama-cpp", "*", "bins", "*", "libllama.*so"))
	if len(libs) == 0 {
		return fmt.Errorf("llamaref: Quantize: no libllama.*so under %s: %w", dir, ErrNotInstalled)
	}
	lib := libs[0]
	libDir := filepath.Dir(lib)
	tmp, err := os.MkdirTemp("", "llamaref-quantize")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	inc := filepath.Join(tmp, "include")
	if err := os.Mkdir(inc, 0o755); err != nil {
		return err
	}
	for _, h := range quantizeHeaders {
		b, err := SourceFile(h)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(inc, filepath.Base(h)), b, 0o644); err != nil {
			return err
		}
	}
	src, bin := filepath.Join(tmp, "quantize.c"), filepath.Join(tmp, "quantize")
	if err := os.WriteFile(src, []byte(quantizeMain), 0o644); err != nil {
		return err
	}
	// Link libllama and the ggml libraries beside it by file name (they
	// carry version suffixes), and find them there at run time.
	args := []string{"-O1", "-I", inc, src, "-o", bin, "-L", libDir, "-l:" + filepath.Base(lib)}
	for _, pat := range []string{"libggml.*so", "libggml-base.so"} {
		ms, _ := filepath.Glob(filepath.Join(libDir, pat))
		for _, m := range ms {
			args = append(args, "-l:"+filepath.Base(m))
		}
	}
	args = append(args, "-Wl,-rpath,"+libDir)
	if msg, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("llamaref: Quantize: building the driver with cc: %v\n%s", err, tail(string(msg), 2000))
	}
	msg, err := exec.Command(bin, in, out, strconv.Itoa(ft)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("llamaref: llama_model_quantize %s -> %s (%s): %v\n%s", in, out, ftype, err, tail(strings.TrimSpace(string(msg)), 2000))
	}
	return nil
}
