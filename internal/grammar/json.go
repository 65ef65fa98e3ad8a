package grammar

// JSON building blocks. Whitespace is bounded (see doc.go): Whitespace() may stand after '{',
// '[', ',' and ':' and before '}' and ']', and is nothing, one space, or a newline followed by
// at most maxIndent spaces or tabs. Nowhere else, and never at the start or end of a value.

// maxIndent bounds the indent after a newline: deep enough for pretty-printed JSON nested ten
// levels at two spaces, small enough that whitespace cannot run on.
const maxIndent = 20

// Bounds used where a schema leaves a number unbounded, so every number ends: at most
// maxIntDigits integer digits (exact in a float64), maxFracDigits fraction digits and
// maxExpDigits exponent digits.
const (
	maxIntDigits  = 15
	maxFracDigits = 15
	maxExpDigits  = 3
)

func cls(s string) Node {
	var rs []runeRange
	for _, r := range s {
		rs = append(rs, runeRange{r, r})
	}
	return charIn(rs)
}

func rng(lo, hi rune) Node { return charIn([]runeRange{{lo, hi}}) }

// Whitespace is the bounded whitespace allowed between JSON tokens.
func Whitespace() Node {
	return Optional(Alt(Literal(" "), Seq(Literal("\n"), Repeat(cls(" \t"), 0, maxIndent))))
}

var digit = rng('0', '9')

// jsonChar is one character of a JSON string, as written: an unescaped character or an escape.
// \u escapes of surrogates are excluded so that one written character is one decoded character
// (minLength and maxLength count decoded characters).
func jsonChar() Node {
	plain := charIn(complement([]runeRange{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))
	hex := charIn([]runeRange{{'0', '9'}, {'a', 'f'}, {'A', 'F'}})
	notSurrogateLead := charIn([]runeRange{{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}})
	u := Seq(Literal("u"), Alt(
		Seq(notSurrogateLead, hex, hex, hex),
		Seq(cls("dD"), rng('0', '7'), hex, hex),
	))
	return Alt(plain, Seq(Literal(`\`), Alt(cls(`"\/bfnrt`), u)))
}

// JSONString is a JSON string of minChars..maxChars characters (maxChars < 0: unbounded),
// quotes included, with escapes.
func JSONString(minChars, maxChars int) Node {
	return Seq(Literal(`"`), Repeat(jsonChar(), minChars, maxChars), Literal(`"`))
}

// jsonNumber is any JSON number with bounded digit counts.
func jsonNumber() Node {
	intPart := Alt(Literal("0"), Seq(rng('1', '9'), Repeat(digit, 0, maxIntDigits-1)))
	frac := Seq(Literal("."), Repeat(digit, 1, maxFracDigits))
	exp := Seq(cls("eE"), Optional(cls("+-")), Repeat(digit, 1, maxExpDigits))
	return Seq(Optional(Literal("-")), intPart, Optional(frac), Optional(exp))
}

// JSONValue is any JSON value (objects and arrays nest without bound, so its size is not
// bounded).
func JSONValue() Node {
	v := ref()
	v.bind(Alt(jsonObjectOf(v), jsonArrayOf(v), JSONString(0, -1), jsonNumber(), Literal("true"), Literal("false"), Literal("null")))
	return v
}

// JSONObject is any JSON object (json_object mode).
func JSONObject() Node { return jsonObjectOf(JSONValue()) }

func jsonObjectOf(value Node) Node {
	ws := Whitespace()
	member := Seq(JSONString(0, -1), Literal(":"), ws, value)
	return Seq(Literal("{"), ws, Alt(
		Literal("}"),
		Seq(member, Repeat(Seq(Literal(","), ws, member), 0, -1), ws, Literal("}")),
	))
}

func jsonArrayOf(value Node) Node {
	return jsonArray(value, 0, -1)
}

// jsonArray is an array of min..max items (max < 0: unbounded).
func jsonArray(item Node, minItems, maxItems int) Node {
	ws := Whitespace()
	var items Node
	if maxItems != 0 {
		more := maxItems - 1
		if maxItems < 0 {
			more = -1
		}
		items = Seq(item, Repeat(Seq(Literal(","), ws, item), max(minItems-1, 0), more), ws, Literal("]"))
	}
	if minItems == 0 {
		return Seq(Literal("["), ws, Alt(Literal("]"), items))
	}
	return Seq(Literal("["), ws, items)
}

// stringNotIn is the rest of a JSON string after its opening quote (closing quote included)
// whose value is none of names. The characters that spell a prefix of a name are written
// unescaped; once the text leaves every name, anything may follow, escapes included.
func stringNotIn(names []string) Node {
	plain := []runeRange{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}
	anyRest := Seq(Repeat(jsonChar(), 0, -1), Literal(`"`))
	var build func(names []string, depth int) Node
	build = func(names []string, depth int) Node {
		// names share their first depth runes; group them by the next rune
		var alts []Node
		isName := false
		var order []rune
		groups := map[rune][]string{}
		for _, n := range names {
			rs := []rune(n)
			if len(rs) == depth {
				isName = true
				continue
			}
			r := rs[depth]
			if _, ok := groups[r]; !ok {
				order = append(order, r)
			}
			groups[r] = append(groups[r], n)
		}
		if !isName {
			alts = append(alts, Literal(`"`))
		}
		excl := append([]runeRange(nil), plain...)
		for _, r := range order {
			excl = append(excl, runeRange{r, r})
			if r < 0x20 || r == '"' || r == '\\' {
				continue // never written unescaped, so this branch cannot spell the name
			}
			alts = append(alts, Seq(Literal(string(r)), build(groups[r], depth+1)))
		}
		alts = append(alts, Seq(charIn(complement(excl)), anyRest))
		return Alt(alts...)
	}
	return build(names, 0)
}
