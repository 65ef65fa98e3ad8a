package grammar

import "testing"

func TestSmoke(t *testing.T) {
	g := mustCompile(t, JSONValue())
	for _, s := range []string{`{}`, `{"a": [1, 2.5, -3e+10, "x\u00e9\n"], "b": {"c": null}}`, `true`, `"é"`} {
		if !matches(t, g, s) {
			t.Errorf("rejects %s", s)
		}
	}
	for _, s := range []string{`{`, `01`, `{"a" : 1}`, `[1,]`, "\"\xff\""} {
		if matches(t, g, s) {
			t.Errorf("accepts %s", s)
		}
	}
	m := g.NewMatcher(bytesVocab)
	mask := make([]uint64, bytesVocab.MaskWords())
	m.FillMask(mask)
	t.Logf("%x", mask)
}
