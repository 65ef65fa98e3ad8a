// Package dashboard owns the live dashboard that `stockpot serve` and `stockpot route` serve
// at GET /dashboard: one self-contained page (HTML, script and the vendored uPlot chart
// library, embedded in the binary and inlined into the page, so nothing is loaded from the
// network and there is no build step), and the Server-Sent Events hub behind
// /dashboard/events that feeds it.
//
// # Why one hub with a ring per browser
//
// The evidence a dashboard shows comes from the server (its Prometheus registry and a ring of
// recent requests), sampled once per Config.Interval by a single goroutine that runs only
// while a browser listens, and pushed to every browser. A browser that reads slowly, or that
// vanished without closing its connection, must never make the server hold memory on its
// behalf: each client has a ring of at most Config.ClientBuffer events, and when it is full
// the oldest event is dropped (counted in Hub.Stats().Dropped), never the producer blocked.
// Every write has a deadline (Config.WriteTimeout), so a connection that takes no bytes ends
// its handler, which unsubscribes. The page is built to lose events: every snapshot carries
// cumulative counters, so a dropped one only coarsens a chart.
//
// # Key types
//
//   - Hub: Publish (never blocks), ServeHTTP (one SSE stream per browser), Stats.
//   - Feed: the ring of recent records (serve's requests, route's decisions), numbered and
//     published in order; Notes: sticky events kept per slot for later browsers.
//   - Page: the page, with the library inlined; Flatten turns a Prometheus gather into the
//     flat name{labels} → value map a snapshot carries.
//
// The series the page reads (stockpot_* metric names, the snapshot and request shapes) are the
// server's and router's contract; a panel whose series is absent (the miss causes before a
// server exports stockpot_prefix_miss_total) says so instead of failing.
package dashboard
