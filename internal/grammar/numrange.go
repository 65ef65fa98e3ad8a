package grammar

import (
	"math/big"
	"strings"
)

// Exact number ranges as digit grammars. A number with d fraction digits is its value scaled by
// 10^d, an integer; the grammar for "scaled integers in [lo, hi], written with d fraction
// digits" splits the range by digit count and recurses on the leading digit, the way a range
// of integers is written as a regular expression.

var bigTen = big.NewInt(10)

func pow10(n int) *big.Int { return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil) }

// fixedRange matches digit strings of len(lo) digits (leading zeros allowed) between lo and hi.
// REQUIRES: len(lo) == len(hi), lo <= hi.
func fixedRange(lo, hi string) Node {
	n := len(lo)
	if n == 0 {
		return Seq()
	}
	if lo == hi {
		return Literal(lo)
	}
	if strings.Trim(lo, "0") == "" && strings.Trim(hi, "9") == "" {
		return Repeat(digit, n, n)
	}
	a, b := rune(lo[0]), rune(hi[0])
	if a == b {
		return Seq(Literal(lo[:1]), fixedRange(lo[1:], hi[1:]))
	}
	zeros, nines := strings.Repeat("0", n-1), strings.Repeat("9", n-1)
	var alts []Node
	midLo, midHi := a+1, b-1
	if lo[1:] == zeros {
		midLo = a
	} else {
		alts = append(alts, Seq(Literal(lo[:1]), fixedRange(lo[1:], nines)))
	}
	if hi[1:] == nines {
		midHi = b
	}
	if midLo <= midHi {
		alts = append(alts, Seq(rng(midLo, midHi), Repeat(digit, n-1, n-1)))
	}
	if hi[1:] != nines {
		alts = append(alts, Seq(Literal(hi[:1]), fixedRange(zeros, hi[1:])))
	}
	return Alt(alts...)
}

func pad(x *big.Int, n int) string {
	s := x.String()
	if len(s) < n {
		s = strings.Repeat("0", n-len(s)) + s
	}
	return s
}

// natRange matches non-negative integers in [lo, hi] without leading zeros.
func natRange(lo, hi *big.Int) Node {
	if lo.Cmp(hi) > 0 {
		return Node{}
	}
	var alts []Node
	for n := len(lo.String()); n <= len(hi.String()); n++ {
		a := pow10(n - 1)
		if n == 1 {
			a = big.NewInt(0)
		}
		if a.Cmp(lo) < 0 {
			a = lo
		}
		b := new(big.Int).Sub(pow10(n), big.NewInt(1))
		if b.Cmp(hi) > 0 {
			b = hi
		}
		if a.Cmp(b) <= 0 {
			alts = append(alts, fixedRange(pad(a, n), pad(b, n)))
		}
	}
	return Alt(alts...)
}

// decimalRange matches non-negative numbers with exactly d fraction digits whose scaled value
// is in [lo, hi].
func decimalRange(lo, hi *big.Int, d int) Node {
	if d == 0 {
		return natRange(lo, hi)
	}
	if lo.Cmp(hi) > 0 {
		return Node{}
	}
	p := pow10(d)
	iLo, rLo := new(big.Int).QuoRem(lo, p, new(big.Int))
	iHi, rHi := new(big.Int).QuoRem(hi, p, new(big.Int))
	dot := Literal(".")
	frac := func(a, b *big.Int) Node { return fixedRange(pad(a, d), pad(b, d)) }
	pMinus1 := new(big.Int).Sub(p, big.NewInt(1))
	if iLo.Cmp(iHi) == 0 {
		return Seq(natRange(iLo, iLo), dot, frac(rLo, rHi))
	}
	alts := []Node{Seq(natRange(iLo, iLo), dot, frac(rLo, pMinus1))}
	midLo, midHi := new(big.Int).Add(iLo, big.NewInt(1)), new(big.Int).Sub(iHi, big.NewInt(1))
	if midLo.Cmp(midHi) <= 0 {
		alts = append(alts, Seq(natRange(midLo, midHi), dot, Repeat(digit, d, d)))
	}
	alts = append(alts, Seq(natRange(iHi, iHi), dot, frac(big.NewInt(0), rHi)))
	return Alt(alts...)
}

// signedRange matches numbers with d fraction digits whose scaled value is in [lo, hi]
// ("-0" and "-0.00" are not written).
func signedRange(lo, hi *big.Int, d int) Node {
	var alts []Node
	zero := big.NewInt(0)
	if hi.Sign() >= 0 {
		a := lo
		if a.Sign() < 0 {
			a = zero
		}
		alts = append(alts, decimalRange(a, hi, d))
	}
	if lo.Sign() < 0 {
		a := new(big.Int).Neg(hi)
		if a.Sign() <= 0 {
			a = big.NewInt(1)
		}
		alts = append(alts, Seq(Literal("-"), decimalRange(a, new(big.Int).Neg(lo), d)))
	}
	return Alt(alts...)
}

// bound is one side of a numeric range.
type bound struct {
	set       bool
	v         *big.Rat
	exclusive bool
}

// scaledRange is [lo, hi] scaled by 10^d and rounded inward; unset sides allow maxIntDigits
// integer digits. ok is false when no such scaled integer exists.
func scaledRange(lo, hi bound, d int) (a, b *big.Int, ok bool) {
	scale := new(big.Rat).SetInt(pow10(d))
	limit := new(big.Int).Sub(new(big.Int).Mul(pow10(maxIntDigits), pow10(d)), big.NewInt(1))
	if lo.set {
		x := new(big.Rat).Mul(lo.v, scale)
		a = ceilRat(x)
		if lo.exclusive && x.IsInt() {
			a.Add(a, big.NewInt(1))
		}
	}
	if hi.set {
		x := new(big.Rat).Mul(hi.v, scale)
		b = floorRat(x)
		if hi.exclusive && x.IsInt() {
			b.Sub(b, big.NewInt(1))
		}
	}
	switch {
	case a == nil && b == nil:
		a, b = new(big.Int).Neg(limit), limit
	case a == nil:
		a = new(big.Int).Neg(limit)
		if b.Cmp(a) < 0 {
			a = new(big.Int).Sub(b, limit)
		}
	case b == nil:
		b = new(big.Int).Set(limit)
		if a.Cmp(b) > 0 {
			b = new(big.Int).Add(a, limit)
		}
	}
	return a, b, a.Cmp(b) <= 0
}

func floorRat(x *big.Rat) *big.Int {
	q := new(big.Int)
	m := new(big.Int)
	q.DivMod(x.Num(), x.Denom(), m) // Euclidean: m >= 0, so q is the floor for a positive denominator
	return q
}

func ceilRat(x *big.Rat) *big.Int {
	q := floorRat(x)
	if !x.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}
