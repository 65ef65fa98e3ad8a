package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs testdata/scripts/*.txt: a grammar is set up, bytes are fed, and after each feed
// the script shows whether the output may or must end and which bytes may come next.
//
//	schema [strict]      input: a JSON schema     -> ok, or the error
//	json-object | json-value
//	feed [quoted]        input: bytes (Go-quoted with quoted) -> what the matcher says
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		var m *Matcher
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			start := func(n Node) string {
				g, err := Compile(n)
				if err != nil {
					return err.Error() + "\n"
				}
				m = g.NewMatcher(bytesVocab)
				return "ok\n" + describe(m)
			}
			switch d.Cmd {
			case "schema":
				n, err := JSONSchemaWith([]byte(d.Input), SchemaOptions{Strict: d.HasArg("strict")})
				if err != nil {
					return err.Error() + "\n"
				}
				return start(n)
			case "json-object":
				return start(JSONObject())
			case "json-value":
				return start(JSONValue())
			case "feed":
				in := d.Input
				if d.HasArg("quoted") {
					s, err := strconv.Unquote(in)
					if err != nil {
						d.Fatalf(t, "bad quoted input: %v", err)
					}
					in = s
				}
				for i := range len(in) {
					if err := m.Accept(int32(in[i])); err != nil {
						return fmt.Sprintf("rejected byte %d (%q)\n", i, in[i]) + describe(m)
					}
				}
				return describe(m)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// describe says complete/done and lists the allowed next bytes as ranges.
func describe(m *Matcher) string {
	mask := make([]uint64, bytesVocab.MaskWords())
	m.FillMask(mask)
	on := func(i int) bool { return mask[i/64]>>(i%64)&1 == 1 }
	show := func(b int) string {
		if b > ' ' && b < 0x7F {
			return string(rune(b))
		}
		return fmt.Sprintf("\\x%02x", b)
	}
	var parts []string
	for b := 0; b < 256; b++ {
		if !on(b) {
			continue
		}
		e := b
		for e+1 < 256 && on(e+1) {
			e++
		}
		if e == b {
			parts = append(parts, show(b))
		} else {
			parts = append(parts, show(b)+"-"+show(e))
		}
		b = e
	}
	if on(256) {
		parts = append(parts, "<eos>")
	}
	return fmt.Sprintf("complete=%v done=%v next: %s\n", m.Complete(), m.Done(), strings.Join(parts, " "))
}
