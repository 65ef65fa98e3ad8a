//go:build ignore

// asmgen_prefetch is shared by the generators whose kernels stream weight
// rows (asmgen_pair.go, asmgen_k512.go); it is passed to go run beside them:
//
//	go run asmgen_pair.go asmgen_prefetch.go

package main

// The kernels prefetch weight rows ahead of the rows being read by at least
// the package variable ·prefetchBytes (prefetch.go): on this project's 2-core
// VM a stream of weight rows reads at 28 GB/s when prefetched one group of rows
// ahead (2.4 KB at K=576) and 42-45 GB/s at 8-10 KB (BenchmarkDecodeBandwidth);
// the hardware prefetcher alone gets half that. Another machine wants another
// distance, so it is a variable that start-up calibration sets
// (kernels.CalibratePrefetch). Prefetching never changes a value.

// prefetchDistance sets R14 to the prefetch distance in bytes: rowBytes
// (R13) times group, doubled until it reaches ·prefetchBytes, so that it is a
// whole number of row groups and R14 added to a row pointer lands on the
// same column of a later group. A zero rowBytes leaves R14 zero.
func prefetchDistance(name string, group int) {
	p("\t// R14: the prefetch distance, whole groups of rows, at least ·prefetchBytes.")
	p("\tMOVQ R13, R14")
	p("\tIMULQ $%d, R14", group)
	p("\tTESTQ R14, R14")
	p("\tJZ %s_pfok", name)
	p("%s_pf:", name)
	p("\tCMPQ R14, ·prefetchBytes(SB)")
	p("\tJAE %s_pfok", name)
	p("\tSHLQ $1, R14")
	p("\tJMP %s_pf", name)
	p("%s_pfok:", name)
}
