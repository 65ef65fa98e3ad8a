// Package syncbuf is a bytes.Buffer that one goroutine may read while another writes: the
// combined output of a subprocess (exec.Cmd copies it on its own goroutines) or of a logger,
// read by a test before the writer is done. The tests that start `stockpot serve`, the router
// and the benchmarks' served replica share it.
package syncbuf
