package bytesize

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Size is a byte count. It implements flag.Value.
type Size int64

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("bytesize: invalid size")

// Common sizes.
const (
	B   Size = 1
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
	PiB Size = 1 << 50
)

var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
}

// Parse reads a size such as "512MiB", "8GiB", "1.5G" or "4096".
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w %q: empty", ErrSyntax, s)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" || strings.Count(num, ".") > 1 || num == "." {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit (KiB, MiB, GiB, ...)", ErrSyntax, s)
	}
	mult, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G, T)", ErrSyntax, s, t[i:])
	}
	// Exact rational arithmetic so "0.1GB" is exactly 100000000 and overflow is detected.
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w %q: bad number %q", ErrSyntax, s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // round down to whole bytes
	if !n.IsInt64() || n.Int64() > math.MaxInt64 {
		return 0, fmt.Errorf("%w %q: larger than %d bytes", ErrSyntax, s, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}

// MustParse is Parse for constants in code; it panics on a bad literal.
func MustParse(s string) int64 {
	n, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return n
}

// Format writes n with the largest binary unit that divides it exactly ("512MiB", "8GiB"),
// or in bytes ("1000").
func Format(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		size int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d", n)
}

// String implements flag.Value.
func (s *Size) String() string {
	if s == nil {
		return "0"
	}
	return Format(int64(*s))
}

// Set implements flag.Value.
func (s *Size) Set(v string) error {
	n, err := Parse(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// Bytes returns the size as an int64.
func (s Size) Bytes() int64 { return int64(s) }

// MarshalText and UnmarshalText let a Size sit in JSON or TOML config as "8GiB".
func (s Size) MarshalText() ([]byte, error) { return []byte(Format(int64(s))), nil }

// UnmarshalText parses text with Parse.
func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }
