package grammar

import (
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// UnsupportedError is a JSON schema keyword (or use of one) that the compiler does not
// implement. The request must fail: an unconstrained answer would be worse.
type UnsupportedError struct {
	Feature string // the keyword, e.g. "pattern", or a short description
	Path    string // JSON pointer of the schema object that uses it ("" is the root)
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("grammar: unsupported JSON schema feature: %s (at %s)", e.Feature, pointerText(e.Path))
}

// SchemaError is a malformed or unsatisfiable schema.
type SchemaError struct {
	Path string // JSON pointer ("" is the root)
	Msg  string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("grammar: invalid JSON schema at %s: %s", pointerText(e.Path), e.Msg)
}

func pointerText(p string) string { return "#" + p }

// SchemaOptions tunes JSONSchemaWith.
type SchemaOptions struct {
	// Strict is OpenAI's json_schema "strict": true: objects never get properties beyond those
	// listed, whatever additionalProperties says.
	Strict bool
	// Limits bound the grammar's cost: its estimate (EstimateSchema) is checked before it is
	// built, and it is compiled under them. Zero fields: DefaultLimits'.
	Limits Limits
}

// JSONSchema builds the grammar of the JSON values valid under schema (non-strict). Errors
// are *UnsupportedError, *SchemaError or *BudgetError.
func JSONSchema(schema []byte) (Node, error) { return JSONSchemaWith(schema, SchemaOptions{}) }

// JSONSchemaWith is JSONSchema with options. The schema is sized first (EstimateSchema's
// walk of the parsed document) and refused with a *BudgetError when its estimate is over
// opt.Limits; what passes is built and compiled under them.
func JSONSchemaWith(schema []byte, opt SchemaOptions) (Node, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return Node{}, &SchemaError{Msg: "not JSON: " + err.Error()}
	}
	opt.Limits = opt.Limits.withDefaults()
	est, err := estimateTree(root, opt)
	if err != nil {
		return Node{}, err
	}
	if err := opt.Limits.Admit(est); err != nil {
		return Node{}, err
	}
	c := &schemaCompiler{root: root, opt: opt, refs: map[string]Node{}}
	n, err := c.schema(root, "")
	if err != nil {
		return Node{}, err
	}
	// Compile once here so that grammar-level problems (a reference cycle that consumes
	// nothing) come back as a SchemaError; Compile reuses the result.
	g, err := CompileWith(n, opt.Limits)
	if err != nil {
		if _, ok := err.(*BudgetError); ok {
			return Node{}, err
		}
		return Node{}, &SchemaError{Msg: strings.TrimPrefix(err.Error(), "grammar: ")}
	}
	n.n.compiled = g
	return n, nil
}

type schemaCompiler struct {
	root *jv
	opt  SchemaOptions
	refs map[string]Node // resolved $ref pointer -> placeholder
	// depth is schema's recursion depth (references followed included); visits counts its
	// calls against opt.Limits.MaxSteps: each spelling of a $ref builds its target anew.
	depth  int
	visits int64
}

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{
	"title": true, "description": true, "$schema": true, "$id": true, "$comment": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "$anchor": true,
}

// keywordType says which instance type a supported keyword constrains ("" = any).
var keywordType = map[string]string{
	"type": "", "enum": "", "const": "", "$ref": "", "anyOf": "", "oneOf": "", "allOf": "",
	"properties": "object", "required": "object", "additionalProperties": "object",
	"items": "array", "prefixItems": "array", "minItems": "array", "maxItems": "array", "uniqueItems": "array",
	"minLength": "string", "maxLength": "string", "format": "string", "pattern": "string",
	"minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number",
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (c *schemaCompiler) schema(v *jv, path string) (Node, error) {
	if c.depth >= maxSchemaNesting {
		return Node{}, &SchemaError{path, "schemas nest deeper than " + strconv.Itoa(maxSchemaNesting) + " (through $ref)"}
	}
	c.visits++
	if lim := c.opt.Limits.withDefaults(); c.visits > lim.MaxSteps {
		return Node{}, &BudgetError{Resource: "steps", Amount: c.visits, Limit: lim.MaxSteps}
	}
	c.depth++
	defer func() { c.depth-- }()
	switch v.kind {
	case jBool:
		if v.b {
			return JSONValue(), nil
		}
		return Node{}, &SchemaError{path, "schema false matches nothing"}
	case jObject:
	default:
		return Node{}, &SchemaError{path, "a schema must be an object or a boolean, not " + v.kind.String()}
	}
	var constraining []string
	for _, m := range v.obj {
		k := m.key
		switch {
		case annotations[k] || strings.HasPrefix(k, "x-"):
			continue
		case k == "uniqueItems":
			if m.val.kind != jBool {
				return Node{}, &SchemaError{path, "uniqueItems must be a boolean"}
			}
			if m.val.b {
				return Node{}, &UnsupportedError{"uniqueItems", path}
			}
			continue
		}
		if _, ok := keywordType[k]; !ok {
			return Node{}, &UnsupportedError{k, path}
		}
		constraining = append(constraining, k)
	}
	only := func(k string) error {
		for _, o := range constraining {
			if o != k {
				return &UnsupportedError{k + " with sibling keyword " + o, path}
			}
		}
		return nil
	}
	if r, ok := v.get("$ref"); ok {
		if err := only("$ref"); err != nil {
			return Node{}, err
		}
		return c.ref(r, path)
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		subs, ok := v.get(k)
		if !ok {
			continue
		}
		if err := only(k); err != nil {
			return Node{}, err
		}
		if subs.kind != jArray || len(subs.arr) == 0 {
			return Node{}, &SchemaError{path, k + " must be a non-empty array"}
		}
		if k == "allOf" && len(subs.arr) > 1 {
			return Node{}, &UnsupportedError{"allOf with more than one schema", path}
		}
		var alts []Node
		for i, s := range subs.arr {
			p := path + "/" + k + "/" + strconv.Itoa(i)
			if s.kind == jBool && !s.b {
				continue // matches nothing: drop the branch
			}
			n, err := c.schema(s, p)
			if err != nil {
				return Node{}, err
			}
			alts = append(alts, n)
		}
		if len(alts) == 0 {
			return Node{}, &SchemaError{path, k + " has no satisfiable branch"}
		}
		return Alt(alts...), nil
	}
	if e, ok := v.get("const"); ok {
		if _, both := v.get("enum"); both {
			return Node{}, &UnsupportedError{"const with enum", path}
		}
		return Literal(string(appendCanonical(nil, e))), nil
	}
	if e, ok := v.get("enum"); ok {
		if e.kind != jArray || len(e.arr) == 0 {
			return Node{}, &SchemaError{path, "enum must be a non-empty array"}
		}
		var alts []Node
		for _, x := range e.arr {
			alts = append(alts, Literal(string(appendCanonical(nil, x))))
		}
		return Alt(alts...), nil
	}
	types, err := c.types(v, path, constraining)
	if err != nil {
		return Node{}, err
	}
	if types == nil {
		return JSONValue(), nil
	}
	var alts []Node
	for _, t := range types {
		var n Node
		var err error
		switch t {
		case "null":
			n = Literal("null")
		case "boolean":
			n = Alt(Literal("true"), Literal("false"))
		case "string":
			n, err = c.stringSchema(v, path)
		case "integer", "number":
			n, err = c.numberSchema(v, path, t == "integer")
		case "array":
			n, err = c.arraySchema(v, path)
		case "object":
			n, err = c.objectSchema(v, path)
		}
		if err != nil {
			return Node{}, err
		}
		alts = append(alts, n)
	}
	return Alt(alts...), nil
}

// types returns the instance types v allows (nil: any value).
func (c *schemaCompiler) types(v *jv, path string, keys []string) ([]string, error) {
	valid := []string{"null", "boolean", "object", "array", "number", "string", "integer"}
	t, ok := v.get("type")
	if ok {
		var out []string
		switch t.kind {
		case jString:
			out = []string{t.str}
		case jArray:
			for _, e := range t.arr {
				if e.kind != jString {
					return nil, &SchemaError{path, "type must be a string or an array of strings"}
				}
				out = append(out, e.str)
			}
		default:
			return nil, &SchemaError{path, "type must be a string or an array of strings"}
		}
		if len(out) == 0 {
			return nil, &SchemaError{path, "type is an empty array"}
		}
		for i, s := range out {
			if !slices.Contains(valid, s) {
				return nil, &SchemaError{path, fmt.Sprintf("unknown type %q", s)}
			}
			if slices.Contains(out[:i], s) {
				return nil, &SchemaError{path, fmt.Sprintf("type %q listed twice", s)}
			}
		}
		if slices.Contains(out, "integer") && slices.Contains(out, "number") {
			out = slices.DeleteFunc(out, func(s string) bool { return s == "integer" })
		}
		return out, nil
	}
	// No type: infer it from the keywords, as the keywords of other types would not apply.
	var inferred []string
	for _, k := range keys {
		if kt := keywordType[k]; kt != "" && !slices.Contains(inferred, kt) {
			inferred = append(inferred, kt)
		}
	}
	switch len(inferred) {
	case 0:
		return nil, nil
	case 1:
		return inferred, nil
	}
	return nil, &UnsupportedError{"keywords of several types without \"type\"", path}
}

func (c *schemaCompiler) ref(r *jv, path string) (Node, error) {
	if r.kind != jString {
		return Node{}, &SchemaError{path, "$ref must be a string"}
	}
	s := r.str
	if !strings.HasPrefix(s, "#") {
		return Node{}, &UnsupportedError{"$ref to " + s + " (only local #/... references)", path}
	}
	if n, ok := c.refs[s]; ok {
		return n, nil
	}
	target := c.root
	ptr := s[1:]
	if ptr != "" {
		if !strings.HasPrefix(ptr, "/") {
			return Node{}, &UnsupportedError{"$ref to an anchor " + s, path}
		}
		un, err := url.PathUnescape(ptr)
		if err != nil {
			return Node{}, &SchemaError{path, "bad $ref " + s}
		}
		for _, tok := range strings.Split(un[1:], "/") {
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
				return Node{}, &SchemaError{path, "$ref " + s + " does not resolve"}
			}
			target = next
		}
	}
	p := ref()
	c.refs[s] = p
	n, err := c.schema(target, ptr)
	if err != nil {
		return Node{}, err
	}
	p.bind(n)
	return p, nil
}

func intKeyword(v *jv, key, path string) (int, bool, error) {
	x, ok := v.get(key)
	if !ok {
		return 0, false, nil
	}
	if x.kind != jNumber {
		return 0, false, &SchemaError{path, key + " must be a non-negative integer"}
	}
	r, ok := new(big.Rat).SetString(x.str)
	if !ok || !r.IsInt() || r.Sign() < 0 {
		return 0, false, &SchemaError{path, key + " must be a non-negative integer"}
	}
	if !r.Num().IsInt64() || r.Num().Int64() > 1<<30 {
		return 1 << 30, true, nil
	}
	return int(r.Num().Int64()), true, nil
}

// lengths reads a min/max pair of counts (max -1 when absent).
func lengths(v *jv, path, minKey, maxKey string) (lo, hi int, err error) {
	lo, _, err = intKeyword(v, minKey, path)
	if err != nil {
		return 0, 0, err
	}
	hi, ok, err := intKeyword(v, maxKey, path)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		hi = -1
	}
	if hi >= 0 && hi < lo {
		return 0, 0, &SchemaError{path, fmt.Sprintf("%s %d > %s %d", minKey, lo, maxKey, hi)}
	}
	return lo, hi, nil
}

func (c *schemaCompiler) stringSchema(v *jv, path string) (Node, error) {
	lo, hi, err := lengths(v, path, "minLength", "maxLength")
	if err != nil {
		return Node{}, err
	}
	if p, ok := v.get("pattern"); ok {
		if p.kind != jString {
			return Node{}, &SchemaError{path, "pattern must be a string"}
		}
		if _, ok := v.get("format"); ok {
			return Node{}, &UnsupportedError{"pattern with format", path}
		}
		_, hasMin := v.get("minLength")
		_, hasMax := v.get("maxLength")
		if hasMin || hasMax {
			return Node{}, &UnsupportedError{"pattern with minLength/maxLength", path}
		}
		n, err := patternNode(p.str)
		if err != nil {
			return Node{}, &UnsupportedError{err.Error(), path}
		}
		return Seq(Literal(`"`), n, Literal(`"`)), nil
	}
	if f, ok := v.get("format"); ok {
		if f.kind != jString {
			return Node{}, &SchemaError{path, "format must be a string"}
		}
		n, fixed, ok := formatNode(f.str)
		if !ok {
			return Node{}, &UnsupportedError{"format " + strconv.Quote(f.str), path}
		}
		switch {
		case fixed < 0 && (lo > 0 || hi >= 0):
			return Node{}, &UnsupportedError{"format " + strconv.Quote(f.str) + " with minLength/maxLength", path}
		case fixed >= 0 && (fixed < lo || (hi >= 0 && fixed > hi)):
			return Node{}, &SchemaError{path, "format " + strconv.Quote(f.str) + " has a fixed length outside minLength..maxLength"}
		}
		return n, nil
	}
	return JSONString(lo, hi), nil
}

// formatNode returns the grammar of a string format and its length in characters (-1: varies).
func formatNode(f string) (Node, int, bool) {
	hex := charIn([]runeRange{{'0', '9'}, {'a', 'f'}, {'A', 'F'}})
	hexes := func(n int) Node { return Repeat(hex, n, n) }
	d := func(n int) Node { return Repeat(digit, n, n) }
	q := Literal(`"`)
	// Days are capped by month (February at 28), so every date written is a real one.
	date := Seq(d(4), Literal("-"), Alt(
		Seq(Literal("02-"), Alt(Seq(Literal("0"), rng('1', '9')), Seq(Literal("1"), digit), Seq(Literal("2"), rng('0', '8')))),
		Seq(Alt(Literal("04"), Literal("06"), Literal("09"), Literal("11")), Literal("-"), Alt(Seq(Literal("0"), rng('1', '9')), Seq(cls("12"), digit), Literal("30"))),
		Seq(Alt(Literal("01"), Literal("03"), Literal("05"), Literal("07"), Literal("08"), Literal("10"), Literal("12")), Literal("-"), Alt(Seq(Literal("0"), rng('1', '9')), Seq(cls("12"), digit), Literal("30"), Literal("31"))),
	))
	hms := Seq(Alt(Seq(cls("01"), digit), Seq(Literal("2"), rng('0', '3'))), Literal(":"), rng('0', '5'), digit, Literal(":"), rng('0', '5'), digit)
	offset := Alt(Literal("Z"), Seq(cls("+-"), Alt(Seq(cls("01"), digit), Seq(Literal("2"), rng('0', '3'))), Literal(":"), rng('0', '5'), digit))
	tm := Seq(hms, Optional(Seq(Literal("."), Repeat(digit, 1, 6))), offset)
	switch f {
	case "date":
		return Seq(q, date, q), 10, true
	case "time":
		return Seq(q, tm, q), -1, true
	case "date-time":
		return Seq(q, date, Literal("T"), tm, q), -1, true
	case "uuid":
		return Seq(q, hexes(8), Literal("-"), hexes(4), Literal("-"), hexes(4), Literal("-"), hexes(4), Literal("-"), hexes(12), q), 36, true
	}
	return Node{}, 0, false
}

func numberBound(v *jv, key, path string) (*big.Rat, bool, error) {
	x, ok := v.get(key)
	if !ok {
		return nil, false, nil
	}
	if x.kind == jBool && strings.HasPrefix(key, "exclusive") {
		return nil, false, nil // draft 4 form, read by numberSchema
	}
	if x.kind != jNumber {
		return nil, false, &SchemaError{path, key + " must be a number"}
	}
	r, ok := new(big.Rat).SetString(x.str)
	if !ok {
		return nil, false, &SchemaError{path, key + " must be a number"}
	}
	// A bound beyond 1e30 or finer than 1e-15 would make digit grammars large.
	lim := new(big.Rat).SetInt(pow10(30))
	if new(big.Rat).Abs(r).Cmp(lim) > 0 {
		return nil, false, &UnsupportedError{key + " beyond 1e30", path}
	}
	if !new(big.Rat).Mul(r, new(big.Rat).SetInt(pow10(maxFracDigits))).IsInt() {
		return nil, false, &UnsupportedError{key + " with more than 15 decimals", path}
	}
	return r, true, nil
}

// fracDigits is how many fraction digits a bounded number may have: enough for the bounds
// and six more than integers, bounded so that every number ends.
func fracDigits(bs ...*big.Rat) int {
	d := 6
	for _, b := range bs {
		if b == nil {
			continue
		}
		for k := 0; k <= maxFracDigits; k++ {
			if new(big.Rat).Mul(b, new(big.Rat).SetInt(pow10(k))).IsInt() {
				d = max(d, k)
				break
			}
		}
	}
	return min(d, maxFracDigits)
}

func (c *schemaCompiler) numberSchema(v *jv, path string, integer bool) (Node, error) {
	var lo, hi bound
	for _, k := range []struct {
		key       string
		dst       *bound
		exclusive bool
	}{{"minimum", &lo, false}, {"exclusiveMinimum", &lo, true}, {"maximum", &hi, false}, {"exclusiveMaximum", &hi, true}} {
		r, ok, err := numberBound(v, k.key, path)
		if err != nil {
			return Node{}, err
		}
		if !ok {
			continue
		}
		// Both an inclusive and an exclusive bound: the tighter one wins.
		if k.dst.set {
			cmp := r.Cmp(k.dst.v)
			tighter := cmp > 0
			if k.dst == &hi {
				tighter = cmp < 0
			}
			if !tighter && !(cmp == 0 && k.exclusive) {
				continue
			}
		}
		*k.dst = bound{set: true, v: r, exclusive: k.exclusive}
	}
	for _, k := range []struct {
		key string
		dst *bound
	}{{"exclusiveMinimum", &lo}, {"exclusiveMaximum", &hi}} {
		if x, ok := v.get(k.key); ok && x.kind == jBool && x.b {
			if !k.dst.set {
				return Node{}, &SchemaError{path, k.key + ": true needs " + strings.ToLower(strings.TrimPrefix(k.key, "exclusive"))}
			}
			k.dst.exclusive = true
		}
	}
	if !lo.set && !hi.set && !integer {
		intPart := Alt(Literal("0"), Seq(rng('1', '9'), Repeat(digit, 0, maxIntDigits-1)))
		return Seq(Optional(Literal("-")), intPart, Optional(Seq(Literal("."), Repeat(digit, 1, maxFracDigits)))), nil
	}
	dmax := 0
	if !integer {
		dmax = fracDigits(lo.v, hi.v)
	}
	var alts []Node
	for d := 0; d <= dmax; d++ {
		a, b, ok := scaledRange(lo, hi, d)
		if ok {
			alts = append(alts, signedRange(a, b, d))
		}
	}
	if len(alts) == 0 {
		return Node{}, &SchemaError{path, "no number satisfies the minimum and maximum"}
	}
	return Alt(alts...), nil
}

func (c *schemaCompiler) arraySchema(v *jv, path string) (Node, error) {
	lo, hi, err := lengths(v, path, "minItems", "maxItems")
	if err != nil {
		return Node{}, err
	}
	var prefix []Node
	if p, ok := v.get("prefixItems"); ok {
		if p.kind != jArray {
			return Node{}, &SchemaError{path, "prefixItems must be an array"}
		}
		for i, s := range p.arr {
			n, err := c.schema(s, path+"/prefixItems/"+strconv.Itoa(i))
			if err != nil {
				return Node{}, err
			}
			prefix = append(prefix, n)
		}
	}
	item := JSONValue()
	if it, ok := v.get("items"); ok {
		if it.kind == jArray {
			return Node{}, &UnsupportedError{"items as an array (use prefixItems)", path}
		}
		if it.kind == jBool && !it.b {
			item = Node{}
			if hi < 0 || hi > len(prefix) {
				hi = len(prefix)
			}
		} else if item, err = c.schema(it, path+"/items"); err != nil {
			return Node{}, err
		}
	}
	if hi >= 0 && hi < lo {
		return Node{}, &SchemaError{path, "minItems exceeds the items allowed"}
	}
	if len(prefix) == 0 {
		return jsonArray(item, lo, hi), nil
	}
	// rest(i): what follows once i >= 1 items are written.
	ws := Whitespace()
	end := Seq(ws, Literal("]"))
	var rest func(i int) Node
	rest = func(i int) Node {
		if i >= len(prefix) {
			more := -1
			if hi >= 0 {
				more = hi - i
			}
			if more == 0 {
				return end
			}
			return Seq(Repeat(Seq(Literal(","), ws, item), max(lo-i, 0), more), end)
		}
		var alts []Node
		if i >= lo {
			alts = append(alts, end)
		}
		if hi < 0 || i < hi {
			alts = append(alts, Seq(Literal(","), ws, prefix[i], rest(i+1)))
		}
		return Alt(alts...)
	}
	first := Seq(prefix[0], rest(1))
	if lo == 0 {
		return Seq(Literal("["), ws, Alt(Literal("]"), first)), nil
	}
	if hi == 0 {
		return Node{}, &SchemaError{path, "maxItems 0 with minItems > 0"}
	}
	return Seq(Literal("["), ws, first), nil
}

func (c *schemaCompiler) objectSchema(v *jv, path string) (Node, error) {
	_, hasProps := v.get("properties")
	_, hasAdditional := v.get("additionalProperties")
	_, hasRequired := v.get("required")
	if !hasProps && !hasAdditional && !hasRequired && !c.opt.Strict {
		return JSONObject(), nil // a bare "type": "object" is any object, as in llama.cpp
	}
	type prop struct {
		name     string
		value    Node
		required bool
	}
	var props []prop
	index := map[string]int{}
	if p, ok := v.get("properties"); ok {
		if p.kind != jObject {
			return Node{}, &SchemaError{path, "properties must be an object"}
		}
		for _, m := range p.obj {
			index[m.key] = len(props)
			props = append(props, prop{name: m.key})
		}
	}
	var required []string
	if r, ok := v.get("required"); ok {
		if r.kind != jArray {
			return Node{}, &SchemaError{path, "required must be an array of strings"}
		}
		for _, e := range r.arr {
			if e.kind != jString {
				return Node{}, &SchemaError{path, "required must be an array of strings"}
			}
			if slices.Contains(required, e.str) {
				return Node{}, &SchemaError{path, fmt.Sprintf("required lists %q twice", e.str)}
			}
			required = append(required, e.str)
		}
	}
	// additionalProperties: absent means none are written when properties are listed (as
	// llama.cpp does); strict ignores it.
	var extra Node
	extraAllowed := false
	if a, ok := v.get("additionalProperties"); ok && !c.opt.Strict {
		switch {
		case a.kind == jBool && !a.b:
		case a.kind == jBool:
			extra, extraAllowed = JSONValue(), true
		default:
			n, err := c.schema(a, path+"/additionalProperties")
			if err != nil {
				return Node{}, err
			}
			extra, extraAllowed = n, true
		}
	}
	for _, name := range required {
		i, ok := index[name]
		if !ok {
			if !extraAllowed {
				if a, ok := v.get("additionalProperties"); ok && a.kind == jBool && !a.b || c.opt.Strict {
					return Node{}, &SchemaError{path, fmt.Sprintf("required property %q is not in properties and additionalProperties is false", name)}
				}
				extra = JSONValue()
			}
			index[name] = len(props)
			props = append(props, prop{name: name, value: extra, required: true})
			continue
		}
		props[i].required = true
	}
	if p, ok := v.get("properties"); ok {
		kept := props[:0]
		for i, m := range p.obj {
			pp := path + "/properties/" + escapePointer(m.key)
			if m.val.kind == jBool && !m.val.b {
				if props[i].required {
					return Node{}, &SchemaError{pp, "required property with schema false"}
				}
				continue
			}
			n, err := c.schema(m.val, pp)
			if err != nil {
				return Node{}, err
			}
			props[i].value = n
			kept = append(kept, props[i])
		}
		kept = append(kept, props[len(p.obj):]...)
		props = kept
	}
	ws := Whitespace()
	var extraMember Node
	if extraAllowed {
		names := make([]string, 0, len(index))
		for name := range index {
			names = append(names, name)
		}
		slices.Sort(names)
		extraMember = Seq(Literal(`"`), stringNotIn(names), Literal(":"), ws, extra)
	}
	member := func(p prop) Node {
		return Seq(Literal(string(appendJSONString(nil, p.name))+":"), ws, p.value)
	}
	comma := Seq(Literal(","), ws)
	// after(i): properties i.. once one has been written; first(i): none written yet (nil when
	// nothing non-empty can follow).
	tail, firstTail := Seq(), Node{}
	if extraAllowed {
		tail = Repeat(Seq(comma, extraMember), 0, -1)
		firstTail = Seq(extraMember, tail)
	}
	after, first := tail, firstTail
	for i := len(props) - 1; i >= 0; i-- {
		p := props[i]
		withP := Seq(member(p), after)
		if p.required {
			after, first = Seq(comma, withP), withP
			continue
		}
		// A skipped optional property leaves what follows it.
		after = Alt(Seq(comma, withP), after)
		if first.n != nil {
			first = Alt(withP, first)
		} else {
			first = withP
		}
	}
	anyRequired := slices.ContainsFunc(props, func(p prop) bool { return p.required })
	close := Literal("}")
	if first.n == nil {
		return Seq(Literal("{"), ws, close), nil
	}
	body := Seq(first, ws, close)
	if anyRequired {
		return Seq(Literal("{"), ws, body), nil
	}
	return Seq(Literal("{"), ws, Alt(close, body)), nil
}
