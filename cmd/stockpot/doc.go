// Command stockpot is Stockpot's single binary: serve, route, bench, lint, soak, demo and the
// model tools.
//
// Why one binary: an operator deploys, benchmarks and checks the cache with the same build, and
// the tests start the real thing (serve, route, soak run this binary as child processes). This
// package only parses flags into each package's Config and wires them; every behaviour lives
// in internal/ (docs/DESIGN.md), so what the flags reach is tested where it is built.
package main
