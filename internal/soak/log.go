package soak

import (
	"io"
	"log"
)

// discardLogger silences the proxies' own logs (a replica being killed is the point).
var discardLogger = log.New(io.Discard, "", 0)
