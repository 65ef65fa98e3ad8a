package grammar

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// HostileAnyOf is the schema of issue 32's probe: an anyOf of branches objects with props
// string properties each (2,000 x 8 is some 900 KB, past a million ops).
func hostileAnyOf(branches, props int) []byte {
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range branches {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"object","properties":{`)
		for j := range props {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"field_%d_%d":{"type":"string","description":"x"}`, i, j)
		}
		fmt.Fprintf(&b, `},"required":["field_%d_0"]}`, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// refChain is a chain of n definitions, each an array of the next: linear in size, but the
// analyses' fixpoint makes a pass per link.
func refChain(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if i == n-1 {
			fmt.Fprintf(&b, `"d%d":{"type":"string","maxLength":3}`, i)
			continue
		}
		fmt.Fprintf(&b, `"d%d":{"type":"array","items":{"$ref":"#/$defs/d%d"},"minItems":1,"maxItems":2}`, i, i+1)
	}
	b.WriteString(`}}`)
	return []byte(b.String())
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc: deterministic for
// one goroutine, unlike the heap's size).
func allocated(f func()) uint64 {
	var a, z runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&z)
	return z.TotalAlloc - a.TotalAlloc
}

// estimateCorpus is schemas of every shape the estimator prices.
func estimateCorpus() []string {
	c := append([]string(nil), fuzzSchemaSeeds...)
	c = append(c, benchSchema, fuzzMatcherSchema, string(hostileAnyOf(1, 8)), string(hostileAnyOf(60, 8)),
		`{"type":"string"}`, `{"type":"number"}`, `{"type":"integer"}`, `{"type":"number","minimum":0}`,
		`{"type":"integer","minimum":0,"maximum":10}`,
		`{"type":"number","minimum":-123456789012345678901234567890.123456789012345,"maximum":123456789012345678901234567890.123456789012345}`,
		`{"type":"object","additionalProperties":true,"properties":{"abcdef":{},"abcxyz":{},"qqqqqqqqqqqq":{}}}`,
		`{"type":"object","additionalProperties":{"type":"string"},"required":["x","y"],"properties":{"éé":{"type":"boolean"}}}`,
		`{"type":"string","format":"uuid"}`, `{"type":"string","pattern":"^[a-z]{3,10}(x|y|z)+$"}`,
		`{"type":"string","pattern":"\\p{L}+[\\x00-\\x7f]"}`, `{"type":"string","pattern":"(?i)hello.world"}`,
		`{"enum":["a\"b\u0001",{"k":[1,2,null]},true,3.5]}`, `{"const":"\u2028x"}`,
		`{"type":"array","items":{"const":"a long literal written twice, once per place it stands"},"maxItems":4}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"},"b":{"$ref":"#/$defs/%78"}},"$defs":{"x":{"type":"object","properties":{"n":{"type":"string"}}}}}`,
		`{"type":"object","properties":{"tree":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}`,
		string(refChain(50)), `{"type":["string","null","object"],"properties":{"a":{}}}`)
	return c
}

// TestEstimateBoundsCompile: on every schema of the corpus the estimate is at least what
// the compiler counts (so what the estimate admits compiles within the bound), and not so
// far above it that ordinary schemas are refused.
func TestEstimateBoundsCompile(t *testing.T) {
	for _, s := range estimateCorpus() {
		est, err := EstimateSchema([]byte(s), SchemaOptions{})
		if err != nil {
			t.Errorf("%.80s: %v", s, err)
			continue
		}
		n, err := JSONSchema([]byte(s))
		if err != nil {
			continue // refused for another reason (the seeds hold some)
		}
		n.n.compiled = nil
		g, b, err := compile(n, Limits{})
		if err != nil {
			t.Fatalf("%.80s: %v", s, err)
		}
		if est < b.bytes {
			t.Errorf("%.80s: estimate %d < %d bytes counted compiling (%d ops)", s, est, b.bytes, len(g.ops))
		}
		if est > 16*b.bytes+256<<10 {
			t.Errorf("%.80s: estimate %d far above the %d bytes counted compiling (%d ops)", s, est, b.bytes, len(g.ops))
		}
	}
}

// TestHostileSchemaRefusedByEstimate: issue 32's 2,000-way anyOf is refused from its
// estimate, before a node is built, allocating little more than its parse.
func TestHostileSchemaRefusedByEstimate(t *testing.T) {
	s := hostileAnyOf(2000, 8)
	if len(s) < 800<<10 {
		t.Fatalf("the schema is %d bytes, want the probe's 800 KB or more", len(s))
	}
	var err error
	alloc := allocated(func() { _, err = JSONSchema(s) })
	var be *BudgetError
	if !errors.As(err, &be) || !be.Estimated {
		t.Fatalf("err = %v, want an estimate's *BudgetError", err)
	}
	if !strings.Contains(err.Error(), "estimated at") || !strings.Contains(err.Error(), "bound of 64.0 MiB") {
		t.Errorf("message %q does not give the estimate and the bound", err)
	}
	if alloc > 50<<20 {
		t.Errorf("refusing allocated %d MB, want under 50 MB", alloc>>20)
	}
	t.Logf("%d KB schema refused after %d MB allocated: %v", len(s)>>10, alloc>>20, err)
}

// TestCompileBudgetStopsEarly: grammars the estimate admits still stop at the compiler's
// bounds, having allocated about the bound and no more.
func TestCompileBudgetStopsEarly(t *testing.T) {
	t.Run("steps", func(t *testing.T) {
		// A chain of 400 references: a few MB estimated, but the analyses' fixpoint makes a
		// pass per link, millions of steps.
		s := refChain(400)
		lim := Limits{MaxSteps: 1 << 19}
		est, err := EstimateSchema(s, SchemaOptions{Limits: lim})
		if err != nil || lim.Admit(est) != nil {
			t.Fatalf("estimate %d (%v) should pass", est, err)
		}
		var be *BudgetError
		alloc := allocated(func() { _, err = JSONSchemaWith(s, SchemaOptions{Limits: lim}) })
		if !errors.As(err, &be) || be.Estimated || be.Resource != "steps" {
			t.Fatalf("err = %v, want the compiler's steps *BudgetError", err)
		}
		if alloc > 64<<20 {
			t.Errorf("stopping allocated %d MB", alloc>>20)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// 40,000 distinct 24-byte literals: a million ops, stopped at 1 MiB.
		alts := make([]Node, 40000)
		for i := range alts {
			alts[i] = Literal(fmt.Sprintf("%024d", i))
		}
		root := Alt(alts...)
		var err error
		alloc := allocated(func() { _, err = CompileWith(root, Limits{MaxBytes: 1 << 20}) })
		var be *BudgetError
		if !errors.As(err, &be) || be.Resource != "bytes" || !errors.Is(err, ErrGrammar) {
			t.Fatalf("err = %v, want the compiler's bytes *BudgetError", err)
		}
		if alloc > 8<<20 {
			t.Errorf("a 1 MiB bound allocated %d KB before stopping", alloc>>10)
		}
		t.Logf("stopped after %d KB allocated: %v", alloc>>10, err)
	})
}

// TestEstimateNesting: a chain of references deeper than maxSchemaNesting is refused by the
// estimate and by the builder alike, as a *SchemaError.
func TestEstimateNesting(t *testing.T) {
	s := refChain(maxSchemaNesting + 10)
	var se *SchemaError
	if _, err := EstimateSchema(s, SchemaOptions{}); !errors.As(err, &se) {
		t.Errorf("EstimateSchema: %v, want a *SchemaError", err)
	}
	if _, err := JSONSchema(s); !errors.As(err, &se) {
		t.Errorf("JSONSchema: %v, want a *SchemaError", err)
	}
}

// FuzzEstimateSchema: the estimator never panics, and refusal is consistent: when the
// estimate is over a bound JSONSchemaWith refuses with the estimate's *BudgetError, and when
// it is under, what JSONSchemaWith compiles counts no more bytes than estimated.
func FuzzEstimateSchema(f *testing.F) {
	for _, s := range estimateCorpus() {
		f.Add([]byte(s), uint16(64))
	}
	f.Fuzz(func(t *testing.T, schema []byte, kb uint16) {
		lim := Limits{MaxBytes: int64(kb)<<10 + 1}
		for _, strict := range []bool{false, true} {
			opt := SchemaOptions{Strict: strict, Limits: lim}
			est, eerr := EstimateSchema(schema, opt)
			if eerr == nil && est < 0 {
				t.Fatalf("estimate %d", est)
			}
			n, err := JSONSchemaWith(schema, opt)
			if eerr != nil {
				if err == nil {
					t.Fatalf("the estimate fails (%v) but the build succeeds", eerr)
				}
				continue
			}
			var be *BudgetError
			if lim.Admit(est) != nil {
				if !errors.As(err, &be) || !be.Estimated || be.Amount != est {
					t.Fatalf("estimate %d over %d, but JSONSchemaWith: %v", est, lim.MaxBytes, err)
				}
				continue
			}
			if errors.As(err, &be) && be.Estimated {
				t.Fatalf("estimate %d within %d, but JSONSchemaWith refuses by estimate: %v", est, lim.MaxBytes, err)
			}
			if err != nil {
				continue
			}
			n.n.compiled = nil
			if _, b, err := compile(n, lim); err == nil && b.bytes > est {
				t.Fatalf("compiling counted %d bytes, more than the estimate %d", b.bytes, est)
			}
		}
	})
}

// BenchmarkHostileSchema: what issue 32's 2,000-way anyOf costs to refuse from its estimate,
// against what compiling it cost before (up to the compiler's 2^20 ops). Compare the
// estimate's ns/op and B/op to compile's.
func BenchmarkHostileSchema(b *testing.B) {
	s := hostileAnyOf(2000, 8)
	b.Run("estimate", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if _, err := JSONSchema(s); err == nil {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("compile", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(s)))
		huge := Limits{MaxBytes: 1 << 40, MaxSteps: 1 << 40}
		for b.Loop() {
			root, err := parseJSON(s)
			if err != nil {
				b.Fatal(err)
			}
			c := &schemaCompiler{root: root, opt: SchemaOptions{Limits: huge}, refs: map[string]Node{}}
			n, err := c.schema(root, "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := CompileWith(n, huge); err == nil {
				b.Fatal("compiled past 2^20 ops")
			}
		}
	})
}
