//go:build ignore

// gencorpus extracts the Go-derived part of the training corpus from the Go
// distribution's own sources (BSD licensed, see corpus/LICENSE-go):
// doc comments as English prose and a few function bodies as code.
//
//	go run gencorpus.go -goroot /usr/local/go
//
// Its output is committed; the trainer never runs this.
package main

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// packages are read in this order; files in each are sorted by name.
var packages = []string{
	"bufio", "bytes", "strings", "strconv", "sort", "container/list", "container/heap",
	"encoding/json", "encoding/binary", "encoding/csv", "fmt", "io", "os", "errors",
	"net/http", "net/url", "time", "sync", "context", "math", "math/big", "regexp",
	"text/template", "unicode/utf8", "path/filepath", "compress/gzip", "hash/crc32",
	"crypto/sha256", "log", "flag", "archive/tar", "image", "html/template", "mime",
}

const (
	maxProse = 220 << 10 // bytes of comment text
	maxCode  = 90 << 10  // bytes of source text
)

func main() {
	goroot := flag.String("goroot", "/usr/local/go", "Go distribution to read")
	flag.Parse()
	var prose, code bytes.Buffer
	for _, pkg := range packages {
		dir := filepath.Join(*goroot, "src", pkg)
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			log.Fatal(err)
		}
		sort.Strings(names)
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				log.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
			if err != nil {
				continue
			}
			for _, cg := range f.Comments {
				t := strings.TrimSpace(cg.Text())
				if len(t) < 80 || strings.Contains(t, "Copyright") || strings.HasPrefix(t, "Code generated") {
					continue
				}
				if prose.Len()+len(t) < maxProse {
					prose.WriteString(t)
					prose.WriteString("\n\n")
				}
			}
			// One short function body per file keeps the code varied.
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				b := src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset]
				if len(b) < 200 || len(b) > 1500 {
					continue
				}
				if code.Len()+len(b) < maxCode {
					code.Write(b)
					code.WriteString("\n\n")
				}
				break
			}
		}
	}
	write("corpus/go_prose.txt", prose.Bytes())
	write("corpus/go_code.txt", code.Bytes())
}

func write(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
