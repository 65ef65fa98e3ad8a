// Package portlock hands out loopback TCP ports for child processes that must be told their
// port before they bind it: redis-server (it has no "pick one and tell me"), and stockpot serve
// and route in the tests and `stockpot soak`, which restart a replica on the same address.
//
// Why not "listen on port 0, close, pass the number on": between the close and the child's
// bind, any other process may get the same port from the kernel (another test package's
// httptest server, another launcher doing the same), and the child then fails to bind or,
// worse, the test talks to somebody else's server. How often depends on what else runs at that
// moment: a test that fails by scheduling.
//
// So ports come from below the kernel's ephemeral range (ip_local_port_range), which the kernel
// never hands out on its own, and each one is claimed by an exclusive flock on a file named for
// it in a shared folder under os.TempDir(), held until the process exits: two launchers, in one
// process or several, never hold the same port, and a port stays ours across a child's restart.
// Redis Cluster also listens on port+10000 (its bus); that port is below the range and claimed
// too. Where the range starts too low to leave that room, Addr fails and says so.
package portlock
