package kernels

// spinPause is the x86 PAUSE hint, for spin-wait loops: it lets the core's
// other hyperthread run and keeps the loop from flooding the memory order
// buffer.
//
//go:noescape
func spinPause()
