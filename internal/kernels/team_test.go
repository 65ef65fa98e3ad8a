package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"stockpot/internal/gguf"
)

// TestStages checks a team's shared stages: every task of every stage runs
// exactly once, and no member passes Wait(s) before every task of s is
// done (each task writes its slot; after the wait a member reads every slot
// of the stage), with 1 to 4 threads, stages of 0 to 9 tasks, and members
// that sleep past any spin budget now and then, so that waits park.
func TestStages(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			p := NewPool(threads)
			defer p.Close()
			st := NewStages(threads)
			const stages = 120
			totals := make([]int32, stages)
			for i := range totals {
				totals[i] = int32(i % 10)
			}
			for call := range 20 {
				st.Reset(totals)
				slots := make([][]atomic.Int64, stages)
				for i := range slots {
					slots[i] = make([]atomic.Int64, totals[i])
				}
				var bad atomic.Int64
				var members atomic.Int64
				p.Team(func(tm *Team, m int) {
					members.Add(1)
					for s := range stages {
						for {
							k, ok := st.Claim(s)
							if !ok {
								break
							}
							if (call+s+k)%97 == 0 {
								time.Sleep(2 * spinMax) // a thread taken away mid-task
							}
							if slots[s][k].Add(1) != 1 && bad.Add(1) < 5 {
								t.Errorf("call %d stage %d task %d ran twice", call, s, k)
							}
							st.Done(s)
						}
						st.Wait(tm, m, s)
						for k := range slots[s] {
							if slots[s][k].Load() != 1 && bad.Add(1) < 5 {
								t.Errorf("call %d: member %d passed stage %d with task %d not done", call, m, s, k)
							}
						}
					}
				})
				if members.Load() != int64(threads) {
					t.Fatalf("call %d: %d members ran, want %d", call, members.Load(), threads)
				}
			}
		})
	}
}

// TestStagesPark makes a wait park for certain: on a machine marked busy
// (more runnable threads than cores, where a waiter parks rather than
// yields), the member holding a stage's one task finishes it only once the
// other member has parked waiting for it, and the parked member must be
// woken.
func TestStagesPark(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	p.busy.Store(true)
	p.checkedAt = time.Now().Add(time.Hour) // no load sample clears it
	st := NewStages(2)
	for call := range 5 {
		st.Reset([]int32{1, 2})
		var after atomic.Int64
		p.Team(func(tm *Team, m int) {
			if _, ok := st.Claim(0); ok {
				for st.parked[1-m].Load() == 0 {
					time.Sleep(50 * time.Microsecond)
				}
				after.Add(1)
				st.Done(0)
			}
			st.Wait(tm, m, 0)
			if after.Load() != 1 {
				t.Errorf("call %d: member %d passed stage 0 before its task was done", call, m)
			}
			for {
				if _, ok := st.Claim(1); !ok {
					break
				}
				st.Done(1)
			}
			st.Wait(tm, m, 1)
		})
	}
	if st.Parks() < 5 {
		t.Fatalf("%d parks, want one a call", st.Parks())
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct{ n, unit, members int }{{960, 64, 2}, {576, 1, 2}, {1536, 16, 3}, {10, 16, 4}, {0, 4, 2}, {49152, 4, 5}} {
		next := 0
		for m := range c.members {
			lo, hi := Split(c.n, c.unit, c.members, m)
			if lo != next || hi < lo || (hi != c.n && hi%c.unit != 0) {
				t.Fatalf("Split(%d, %d, %d, %d) = [%d, %d), want from %d, boundaries multiples of %d", c.n, c.unit, c.members, m, lo, hi, next, c.unit)
			}
			if units := (c.n + c.unit - 1) / c.unit; (hi-lo+c.unit-1)/c.unit > units/c.members+1 {
				t.Fatalf("Split(%d, %d, %d, %d) = [%d, %d): more than its share", c.n, c.unit, c.members, m, lo, hi)
			}
			next = hi
		}
		if next != c.n {
			t.Fatalf("Split(%d, %d, %d, ·) covers [0, %d)", c.n, c.unit, c.members, next)
		}
	}
}

// TestGEMVMatchesMatMul checks that GEMV over any split of the rows, in any
// order, gives bitwise the MatMul of one row, for every weight type, with
// each tile family (the quantized kernels pick theirs at start-up).
func TestGEMVMatchesMatMul(t *testing.T) {
	types := []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}
	saved := simd
	defer func() { simd = saved }()
	for _, fam := range simdFamilies() {
		simd = fam
		for _, typ := range types {
			t.Run(famName(fam)+"/"+typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(5, uint64(typ)))
				for _, shape := range [][2]int{{577, 256}, {96, 512}, {1000, 768}, {5, 256}} {
					N, K := shape[0], shape[1]
					var w *Weight
					if typeIndex(typ) >= 0 {
						if K%16 == 0 {
							K += 3 // a K%kstep tail for the float kernels
						}
						w = randWeight(r, typ, N, K)
					} else {
						w, _ = randQuantWeight(t, r, typ, N, K)
					}
					if !GEMVOK(w) {
						t.Fatalf("GEMVOK(%v) false with family %s", typ, famName(fam))
					}
					x := randFloats(r, K)
					want := make([]float32, N)
					MatMul(nil, want, x, 1, w)
					for trial := range 4 {
						got := make([]float32, N)
						for i := range got {
							got[i] = float32(math.NaN())
						}
						var a Act
						a.Set(x)
						cuts := []int{0, N}
						for range trial * 3 {
							cuts = append(cuts, r.IntN(N+1))
						}
						sortInts(cuts)
						for _, i := range r.Perm(len(cuts) - 1) {
							a.GEMV(got, w, cuts[i], cuts[i+1])
						}
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%dx%d cuts %v row %d: GEMV %v, MatMul %v", N, K, cuts, i, got[i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestAttendHeadsMatchesAttention checks the decode step's pieces against
// the whole-token calls: K/V stored head by head in any order equal
// StoreKV's, and heads attended in any split equal Attention's output.
func TestAttendHeadsMatchesAttention(t *testing.T) {
	withFamilies(t, func(t *testing.T) {
		for _, f16 := range []bool{false, true} {
			t.Run(fmt.Sprintf("f16=%v", f16), func(t *testing.T) {
				r := rand.New(rand.NewPCG(8, 2))
				const nh, nkv, hd, layers = 9, 3, 64, 2
				a := AttnParams{NHeads: nh, NKVHeads: nkv, HeadDim: hd, Scale: 0.125}
				for _, pos := range []int{0, 5, 63, 64, 300} {
					kvA := newTestKV(r, f16, layers, nkv, hd, 16, pos+1)
					kvB := &PagedKV{BlockSize: kvA.BlockSize, Layers: layers, KVHeads: nkv, HeadDim: hd, Table: kvA.Table}
					if f16 {
						kvB.F16 = append([]uint16(nil), kvA.F16...)
					} else {
						kvB.F32 = append([]float32(nil), kvA.F32...)
					}
					k, v := randFloats(r, nkv*hd), randFloats(r, nkv*hd)
					StoreKV(kvA, 1, pos, k, v)
					for _, h := range r.Perm(nkv) {
						StoreKVHeads(kvB, 1, pos, 1, v, h, h+1)
						StoreKVHeads(kvB, 1, pos, 0, k, h, h+1)
					}
					if f16 {
						for i := range kvA.F16 {
							if kvA.F16[i] != kvB.F16[i] {
								t.Fatalf("pos %d: arena element %d: StoreKVHeads %d, StoreKV %d", pos, i, kvB.F16[i], kvA.F16[i])
							}
						}
					} else {
						for i := range kvA.F32 {
							if math.Float32bits(kvA.F32[i]) != math.Float32bits(kvB.F32[i]) {
								t.Fatalf("pos %d: arena element %d: StoreKVHeads %v, StoreKV %v", pos, i, kvB.F32[i], kvA.F32[i])
							}
						}
					}
					if !SingleQuery(kvA, a) {
						t.Fatalf("no single-query path for head dim %d with family %s", hd, famName(simd))
					}
					q := randFloats(r, nh*hd)
					want := make([]float32, nh*hd)
					Attention(nil, want, q, []int{pos}, kvA, 1, a)
					got := make([]float32, nh*hd)
					buf := make([]float32, AttendBufLen(pos, a))
					cut := r.IntN(nh + 1)
					AttendHeads(got, q, pos, kvB, 1, a, cut, nh, buf)
					AttendHeads(got, q, pos, kvB, 1, a, 0, cut, buf)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("pos %d cut %d element %d: AttendHeads %v, Attention %v", pos, cut, i, got[i], want[i])
						}
					}
				}
			})
		}
	})
}
