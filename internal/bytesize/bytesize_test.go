package bytesize

import (
	"errors"
	"flag"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"12B", 12},
		{"512MiB", 512 << 20},
		{"8GiB", 8 << 30},
		{"8gib", 8 << 30},
		{" 8 GiB ", 8 << 30},
		{"1.5GiB", 3 << 29},
		{"64k", 64 << 10},
		{"2G", 2 << 30},
		{"1KB", 1000},
		{"0.1GB", 100000000},
		{"1TB", 1e12},
		{"1TiB", 1 << 40},
		{"0.5", 0},
		{"8191PiB", 8191 << 50},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "GiB", "-1", "-1GiB", "1.2.3", "12XB", "1e3", ".", "8192PiB", "99999999999999999999"} {
		if n, err := Parse(in); err == nil || !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %d, %v; want ErrSyntax", in, n, err)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 512 << 20, 8 << 30, 3 << 29, 1<<40 + 1} {
		s := Format(n)
		got, err := Parse(s)
		if err != nil || got != n {
			t.Errorf("Parse(Format(%d)=%q) = %d, %v", n, s, got, err)
		}
	}
	if got := Format(8 << 30); got != "8GiB" {
		t.Errorf("Format(8GiB) = %q", got)
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var s Size
	fs.Var(&s, "kv-memory", "size")
	if err := fs.Parse([]string{"--kv-memory", "512MiB"}); err != nil {
		t.Fatal(err)
	}
	if s != 512*MiB {
		t.Fatalf("got %d", s)
	}
	if err := fs.Parse([]string{"--kv-memory", "lots"}); err == nil {
		t.Fatal("want error")
	}
}
