package grammar

import (
	"net/url"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// A schema is sized before it is built. The node graph and the compiled ops grow together
// and both in proportion to the ops, so the estimate counts ops the way schema.go writes
// them, from the parsed schema alone: one walk, each $ref target walked once (its cost is
// remembered by target and added again for each spelling of a reference to it, as the
// schema compiler builds each spelling anew), and nothing allocated in proportion to the
// grammar. Building blocks (any JSON value, a string, whitespace, the formats) are priced by
// compiling them once. The estimate leans high: what it admits compiles within about the
// same bytes (estimate_test.go checks both directions on a corpus).

// estimateBytesPerOp converts estimated ops to bytes as the compiler counts them
// (budget.go): 100 to 220 bytes per op measured on schemas of every shape, the top for
// large ones whose ops array grew by doubling.
const estimateBytesPerOp = 224

// maxSchemaNesting bounds how deep schemas nest when $refs are followed (each level is a
// frame of the builder's recursion); a document alone nests at most maxSchemaDepth.
const maxSchemaNesting = 1000

// estimateCap saturates estimates: far over any budget, far from overflowing.
const estimateCap = int64(1) << 50

// EstimateSchema returns the estimated bytes compiling schema's grammar takes, in the unit of
// Limits.MaxBytes, without building it: one walk of the parsed schema. Errors are a
// *SchemaError for a document that is not JSON or that nests too deep through $refs; other
// problems are left to JSONSchemaWith.
func EstimateSchema(schema []byte, opt SchemaOptions) (int64, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return 0, &SchemaError{Msg: "not JSON: " + err.Error()}
	}
	return estimateTree(root, opt)
}

// EstimateObject is the estimate of JSONObject's grammar (a tool without parameters).
func EstimateObject() int64 { return blockCost().object * estimateBytesPerOp }

// EstimateLiteral is the estimate of a literal of n bytes.
func EstimateLiteral(n int) int64 { return int64(n+1) * estimateBytesPerOp }

// Admit returns a *BudgetError when estimate is over l.MaxBytes.
func (l Limits) Admit(estimate int64) error {
	l = l.withDefaults()
	if estimate > l.MaxBytes {
		return &BudgetError{Estimated: true, Resource: "bytes", Amount: estimate, Limit: l.MaxBytes}
	}
	return nil
}

func estimateTree(root *jv, opt SchemaOptions) (int64, error) {
	e := &estimator{root: root, opt: opt, k: blockCost()}
	own := e.schema(root, 0)
	if e.err != nil {
		return 0, e.err
	}
	ops := sat(own, e.refs)
	if ops >= estimateCap/estimateBytesPerOp {
		return estimateCap, nil
	}
	return ops * estimateBytesPerOp, nil
}

// sat adds with saturation at estimateCap.
func sat(a, b int64) int64 {
	if a >= estimateCap || b >= estimateCap || a+b >= estimateCap {
		return estimateCap
	}
	return a + b
}

type estimator struct {
	root *jv
	opt  SchemaOptions
	k    blockCosts
	seen map[string]bool // $ref spellings already counted (the builder shares each)
	memo map[*jv]int64   // a $ref target's own ops (its own nested targets counted apart)
	refs int64           // ops of every $ref target, each spelling once
	err  error
}

// schema returns the ops of v's grammar, leaving out $ref targets (added to e.refs).
func (e *estimator) schema(v *jv, depth int) int64 {
	if e.err != nil {
		return 0
	}
	if depth > maxSchemaNesting {
		e.err = &SchemaError{Msg: "schemas nest deeper than " + strconv.Itoa(maxSchemaNesting) + " (through $ref)"}
		return 0
	}
	switch v.kind {
	case jBool:
		if v.b {
			return e.k.value
		}
		return 0
	case jObject:
	default:
		return 0
	}
	if r, ok := v.get("$ref"); ok {
		if r.kind == jString {
			e.ref(r.str, depth)
		}
		return 2
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if subs, ok := v.get(k); ok {
			total := int64(0)
			if subs.kind == jArray {
				for _, s := range subs.arr {
					total = sat(total, sat(e.schema(s, depth+1), 2))
				}
			}
			return total
		}
	}
	if c, ok := v.get("const"); ok {
		return canonicalLen(c) + 1
	}
	if en, ok := v.get("enum"); ok {
		total := int64(1)
		if en.kind == jArray {
			for _, x := range en.arr {
				total = sat(total, canonicalLen(x)+2)
			}
		}
		return total
	}
	total := int64(0)
	untyped := true
	for _, t := range e.types(v) {
		untyped = false
		switch t {
		case "null":
			total += 5
		case "boolean":
			total += 11
		case "string":
			total = sat(total, e.stringCost(v))
		case "integer", "number":
			total = sat(total, e.numberCost(v, t == "integer"))
		case "array":
			total = sat(total, e.arrayCost(v, depth))
		case "object":
			total = sat(total, e.objectCost(v, depth))
		}
	}
	if untyped {
		return e.k.value
	}
	return total
}

// types mirrors schemaCompiler.types without its errors (nil: any value).
func (e *estimator) types(v *jv) []string {
	if t, ok := v.get("type"); ok {
		switch t.kind {
		case jString:
			return []string{t.str}
		case jArray:
			out := make([]string, 0, len(t.arr))
			for _, x := range t.arr {
				if x.kind == jString {
					out = append(out, x.str)
				}
			}
			return out
		}
		return nil
	}
	var out []string
	for _, m := range v.obj {
		if kt := keywordType[m.key]; kt != "" {
			out = append(out, kt)
			break
		}
	}
	return out
}

func (e *estimator) ref(s string, depth int) {
	if e.seen[s] {
		return
	}
	if e.seen == nil {
		e.seen, e.memo = map[string]bool{}, map[*jv]int64{}
	}
	e.seen[s] = true
	target := resolvePointer(e.root, s)
	if target == nil {
		return
	}
	own, ok := e.memo[target]
	if !ok {
		own = e.schema(target, depth+1)
		e.memo[target] = own
	}
	e.refs = sat(e.refs, own)
}

// resolvePointer follows a local $ref as schemaCompiler.ref does; nil when it does not
// resolve (the builder then reports it).
func resolvePointer(root *jv, s string) *jv {
	if !strings.HasPrefix(s, "#") {
		return nil
	}
	ptr := s[1:]
	if ptr == "" {
		return root
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil
	}
	un, err := url.PathUnescape(ptr)
	if err != nil {
		return nil
	}
	target := root
	for tok := range strings.SplitSeq(un[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var next *jv
		switch target.kind {
		case jObject:
			next, _ = target.get(tok)
		case jArray:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(target.arr) {
				next = target.arr[i]
			}
		}
		if next == nil {
			return nil
		}
		target = next
	}
	return target
}

func (e *estimator) stringCost(v *jv) int64 {
	if p, ok := v.get("pattern"); ok && p.kind == jString {
		return patternCost(p.str)
	}
	if f, ok := v.get("format"); ok && f.kind == jString {
		if c, ok := e.k.formats[f.str]; ok {
			return c
		}
		return 0
	}
	return e.k.str
}

// patternCost prices a pattern's grammar per regexp node: a character costs its UTF-8
// sequences and the escapes of the specials it covers; repeats are counted, never unrolled;
// each top-level alternative brings its own unanchored text on both sides (patternTop).
func patternCost(p string) int64 {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return 0
	}
	var walk func(re *syntax.Regexp) int64
	walk = func(re *syntax.Regexp) int64 {
		c := int64(4)
		switch re.Op {
		case syntax.OpLiteral:
			per := int64(8)
			if re.Flags&syntax.FoldCase != 0 {
				per = 16
			}
			c += per * int64(len(re.Rune))
		case syntax.OpCharClass:
			for i := 0; i+1 < len(re.Rune); i += 2 {
				c += 16 + 7*specialsIn(re.Rune[i], re.Rune[i+1])
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			c += 64 + 7*34
		}
		for _, s := range re.Sub {
			c = sat(c, walk(s))
		}
		return c
	}
	// patternTop's shape: the text around the match (two runs of any character) once per
	// top-level alternative, so "a|b|" builds three pairs.
	var top func(re *syntax.Regexp) int64
	top = func(re *syntax.Regexp) int64 {
		if re.Op == syntax.OpAlternate {
			c := int64(4)
			for _, s := range re.Sub {
				c = sat(c, top(s))
			}
			return c
		}
		return sat(walk(re), 2*blockCost().char)
	}
	return top(re)
}

// specialsIn counts the characters of [lo, hi] that JSON writes escaped.
func specialsIn(lo, hi rune) int64 {
	n := int64(0)
	if lo <= 0x1F {
		n += int64(min(hi, 0x1F) - lo + 1)
	}
	for _, c := range []rune{'"', '\\'} {
		if lo <= c && c <= hi {
			n++
		}
	}
	return n
}

// numberCost prices a number: digit grammars for bounds grow with the square of the digits
// written, once per fraction length allowed.
func (e *estimator) numberCost(v *jv, integer bool) int64 {
	lower, upper := false, false
	intDigits, frac := 1, 0
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		x, ok := v.get(k)
		if !ok || x.kind != jNumber {
			continue
		}
		if strings.HasSuffix(k, "imum") && strings.Contains(strings.ToLower(k), "min") {
			lower = true
		} else {
			upper = true
		}
		s := strings.TrimLeft(x.str, "-")
		mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
		ip, fp, _ := strings.Cut(mant, ".")
		ex, _ := strconv.Atoi(exp)
		intDigits = max(intDigits, min(len(ip)+max(ex, 0), 31))
		frac = max(frac, min(len(fp)-min(ex, 0), maxFracDigits))
	}
	if !lower && !upper && !integer {
		return e.k.number
	}
	if !lower || !upper {
		intDigits = max(intDigits, maxIntDigits) // an open side is up to maxIntDigits long
	}
	dmax := 0
	if !integer {
		dmax = max(6, frac)
	}
	l := int64(intDigits + dmax)
	return int64(dmax+1) * (8*l + l*l/2 + 20)
}

func (e *estimator) arrayCost(v *jv, depth int) int64 {
	total := 2*e.k.ws + 12
	if p, ok := v.get("prefixItems"); ok && p.kind == jArray {
		for _, s := range p.arr {
			total = sat(total, sat(e.schema(s, depth+1), e.k.ws+8))
		}
	}
	item := e.k.value
	if it, ok := v.get("items"); ok {
		item = e.schema(it, depth+1)
	}
	// an item is written twice (the first, then the repeat), which copies a literal
	return sat(total, 2*item)
}

func (e *estimator) objectCost(v *jv, depth int) int64 {
	props, hasProps := v.get("properties")
	add, hasAdditional := v.get("additionalProperties")
	req, hasRequired := v.get("required")
	if !hasProps && !hasAdditional && !hasRequired && !e.opt.Strict {
		return e.k.object
	}
	total := e.k.ws + 12
	names := int64(0) // runes of every listed name, which stringNotIn spells out
	if hasProps && props.kind == jObject {
		for _, m := range props.obj {
			total = sat(total, sat(e.schema(m.val, depth+1), int64(len(m.key))+e.k.ws+16))
			names += int64(utf8.RuneCountInString(m.key)) + 1
		}
	}
	if hasRequired && req.kind == jArray {
		for _, r := range req.arr {
			if r.kind == jString {
				if !hasProps || props.kind != jObject {
					total = sat(total, int64(len(r.str))+e.k.ws+16)
				} else if _, ok := props.get(r.str); !ok {
					total = sat(total, int64(len(r.str))+e.k.ws+16)
				}
				names += int64(utf8.RuneCountInString(r.str)) + 1
			}
		}
		total = sat(total, e.k.value) // a required name not listed takes any value
	}
	if hasAdditional && !e.opt.Strict && !(add.kind == jBool && !add.b) {
		// the extra member's value, and the trie of names it must not spell: per node a
		// character class beside the names' characters, per name character a literal
		total = sat(total, e.schema(add, depth+1))
		total = sat(total, sat((e.k.notIn+12)*(names+1), 2*e.k.ws+e.k.char+24))
	}
	return total
}

// canonicalLen is the length of appendCanonical(nil, v), or more (strings are counted as
// their longest escapes), computed without writing it.
func canonicalLen(v *jv) int64 {
	switch v.kind {
	case jNull:
		return 4
	case jBool:
		return 5
	case jNumber:
		return int64(len(v.str))
	case jString:
		return quotedLen(v.str)
	case jArray:
		n := int64(2)
		for _, x := range v.arr {
			n = sat(n, canonicalLen(x)+1)
		}
		return n
	}
	n := int64(2)
	for _, m := range v.obj {
		n = sat(n, sat(quotedLen(m.key), canonicalLen(m.val)+2))
	}
	return n
}

// quotedLen bounds the length of s as a JSON string: escapes are at most 6 bytes.
func quotedLen(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r < 0x20, r == utf8.RuneError, r == 0x2028, r == 0x2029:
			n += 6
		case r == '"' || r == '\\':
			n += 2
		default:
			n += int64(size)
		}
		i += size
	}
	return n
}

// blockCosts are the ops of the building blocks schema.go writes afresh at each use.
type blockCosts struct {
	value   int64            // JSONValue: true, {}, an untyped schema
	object  int64            // JSONObject: a bare "type": "object"
	str     int64            // JSONString
	char    int64            // jsonChar
	number  int64            // an unbounded number
	ws      int64            // Whitespace
	notIn   int64            // stringNotIn's class of the characters off every name
	formats map[string]int64 // format -> its grammar
}

// blockCost prices the blocks by compiling each once.
var blockCost = sync.OnceValue(func() blockCosts {
	ops := func(n Node) int64 {
		g, _, err := compile(n, Limits{})
		if err != nil {
			panic("grammar: a building block does not compile: " + err.Error())
		}
		return int64(len(g.ops))
	}
	number, err := (&schemaCompiler{}).numberSchema(&jv{kind: jObject}, "", false)
	if err != nil {
		panic(err)
	}
	k := blockCosts{
		value: ops(JSONValue()), object: ops(JSONObject()), str: ops(JSONString(0, -1)),
		char: ops(jsonChar()), number: ops(number), ws: ops(Whitespace()),
		notIn:   ops(charIn(complement([]runeRange{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))),
		formats: map[string]int64{},
	}
	for _, f := range []string{"date", "time", "date-time", "uuid"} {
		n, _, _ := formatNode(f)
		k.formats[f] = ops(n)
	}
	return k
})
