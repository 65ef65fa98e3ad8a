package miss

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/prefix"
)

// byteText is a tokenizer for tests: one token per byte, plus control tokens written
// <|name|> in the scripts.
type byteText struct{ names []string }

var testText = &byteText{names: []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"}}

func (b *byteText) encode(s string) []int32 {
	var out []int32
outer:
	for len(s) > 0 {
		for i, n := range b.names {
			if strings.HasPrefix(s, n) {
				out = append(out, int32(256+i))
				s = s[len(n):]
				continue outer
			}
		}
		out = append(out, int32(s[0]))
		s = s[1:]
	}
	return out
}

func (b *byteText) Piece(id int32) []byte {
	if id >= 256 {
		return []byte(b.names[id-256])
	}
	return []byte{byte(id)}
}

func (b *byteText) IsControl(id int32) bool { return id >= 256 }

func (b *byteText) Decode(ids []int32) string {
	var sb strings.Builder
	for _, id := range ids {
		if id < 256 {
			sb.WriteByte(byte(id))
		}
	}
	return sb.String()
}

// segmentsOf cuts a ChatML prompt at each <|im_start|>: the role after it names the segment.
func segmentsOf(toks []int32) []Segment {
	var segs []Segment
	msg := 0
	for i, id := range toks {
		if id != 256 {
			continue
		}
		j := i + 1
		for j < len(toks) && toks[j] != '\n' {
			j++
		}
		role := testText.Decode(toks[i+1 : j])
		switch {
		case role == "system":
			segs = append(segs, Segment{Kind: "system", Index: msg, Role: role, Token: i})
		case j >= len(toks)-1 && role == "assistant":
			segs = append(segs, Segment{Kind: "generation", Token: i})
		default:
			segs = append(segs, Segment{Kind: "message", Index: msg, Role: role, Token: i})
		}
		msg++
	}
	return segs
}

// TestExplain runs the scripts in testdata: a real prefix cache holds the cached prompts,
// Diverge finds the evidence as the engine does, and Explain names the cause.
//
//	cache [blocks=N] [block-size=B]   a new cache
//	store [salt=S]                    commit the input's full blocks (then release them)
//	explain [salt=S]                  the miss of the input prompt
//
// Input lines are joined with "\n"; a trailing "\" joins without one; "\t" is a tab.
func TestExplain(t *testing.T) {
	datadriven.Walk(t, "testdata/explain", func(t *testing.T, path string) {
		var c *prefix.Cache
		bs := 16
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			salt := ""
			if d.HasArg("salt") {
				d.ScanArgs(t, "salt", &salt)
			}
			root := prefix.Root([]byte("test-model"), salt)
			toks := testText.encode(scriptText(d.Input))
			switch d.Cmd {
			case "cache":
				blocks := 256
				if d.HasArg("blocks") {
					d.ScanArgs(t, "blocks", &blocks)
				}
				bs = 16
				if d.HasArg("block-size") {
					d.ScanArgs(t, "block-size", &bs)
				}
				var err error
				if c, err = prefix.New(prefix.Config{NumBlocks: blocks, BlockSize: bs, MinHitsToProtect: 0, DisableEvents: true}); err != nil {
					t.Fatal(err)
				}
				return ""
			case "store":
				m := c.Match(root, toks)
				got, err := c.Allocate(len(toks)/bs - len(m.Blocks))
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				table := append(m.Blocks, got...)
				for i := len(m.Blocks); i < len(table); i++ {
					parent := root
					if i > 0 {
						parent = m.Hashes[i-1]
					}
					table[i], _ = c.Commit(m.Hashes[i], parent, toks[i*bs:(i+1)*bs], table[i])
				}
				c.Release(table)
				if err := c.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("stored %d blocks (%d reused)\n", len(table), len(m.Blocks))
			case "explain":
				m := c.Match(root, toks)
				c.Release(m.Blocks)
				ev := FromDivergence(c.Diverge(root, m.Hashes, toks, len(m.Blocks), MaxCachedTokens), bs)
				if ev == nil {
					return "no miss\n"
				}
				r := Explain(*ev, toks, segmentsOf(toks), testText)
				var out strings.Builder
				fmt.Fprintf(&out, "cause=%s offset=%d block=%d matched=%d", r.Cause, r.Offset, r.Block, r.MatchedTokens)
				if r.Segment != "" {
					fmt.Fprintf(&out, " segment=%q", r.Segment)
				}
				fmt.Fprintf(&out, "\ndetail: %s\n", r.Detail)
				if r.Prompt != "" || r.Cached != "" {
					fmt.Fprintf(&out, "prompt: %q\ncached: %q\n", r.Prompt, r.Cached)
				}
				return out.String()
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func scriptText(in string) string {
	in = strings.ReplaceAll(in, "\\\n", "")
	return strings.ReplaceAll(in, `\t`, "\t")
}
