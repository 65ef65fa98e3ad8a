package vllmevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// The pure-Go ZeroMQ library reads a frame by allocating the length its header announces, so a
// peer that can reach a bound socket could announce 2^62 bytes and take the process down. A
// Guard stands in front of a bound TCP socket: it accepts the connections, checks every frame
// header a peer sends (ZMTP 3: a 64-byte greeting, then frames of a flags byte and a 1- or
// 8-byte big-endian size), and cuts a connection whose frame is larger than its bound or
// whose bytes are not ZMTP, before the library sees that header. Everything else passes
// through unchanged, both ways, as it arrives.

// greetingBytes is ZMTP 3's greeting: signature, version, mechanism, as-server, filler.
const greetingBytes = 64

// ZMTP frame flags.
const (
	flagMore    = 1 << 0
	flagLong    = 1 << 1
	flagCommand = 1 << 2
)

// ErrFrameTooLarge is a frame over the guard's bound; ErrNotZMTP bytes that are not ZMTP 3.
var (
	ErrFrameTooLarge = errors.New("vllmevents: ZMTP frame over the bound")
	ErrNotZMTP       = errors.New("vllmevents: not a ZMTP 3 stream")
)

// CheckFrames reads a peer's ZMTP byte stream from r and writes it to w unchanged as it
// comes, until r ends or a frame header fails: a frame over maxFrame bytes (ErrFrameTooLarge)
// or a malformed greeting or flags byte (ErrNotZMTP). The header that fails is not written.
func CheckFrames(w io.Writer, r io.Reader, maxFrame int64) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var greeting [greetingBytes]byte
	if _, err := io.ReadFull(br, greeting[:1]); err != nil {
		return err
	}
	if greeting[0] != 0xFF {
		return fmt.Errorf("%w: greeting starts with %#x", ErrNotZMTP, greeting[0])
	}
	if _, err := w.Write(greeting[:1]); err != nil {
		return err
	}
	// The rest of the greeting goes on as it comes: a peer may send it in parts and wait for
	// the other side's between them.
	for got := 1; got < greetingBytes; {
		n, err := br.Read(greeting[got:])
		if n > 0 {
			if got < 10 && got+n >= 10 && greeting[9] != 0x7F {
				return fmt.Errorf("%w: signature", ErrNotZMTP)
			}
			if got < 11 && got+n >= 11 && greeting[10] < 3 {
				return fmt.Errorf("%w: version %d", ErrNotZMTP, greeting[10])
			}
			if _, werr := w.Write(greeting[got : got+n]); werr != nil {
				return werr
			}
			got += n
		}
		if err != nil {
			return err
		}
	}
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(br, hdr[:1]); err != nil {
			return err
		}
		fl := hdr[0]
		if fl&^(flagMore|flagLong|flagCommand) != 0 {
			return fmt.Errorf("%w: flags %#x", ErrNotZMTP, fl)
		}
		n := 2
		size := int64(0)
		if fl&flagLong != 0 {
			if _, err := io.ReadFull(br, hdr[1:9]); err != nil {
				return err
			}
			u := binary.BigEndian.Uint64(hdr[1:9])
			if u > uint64(maxFrame) {
				return fmt.Errorf("%w: %d bytes announced, at most %d", ErrFrameTooLarge, u, maxFrame)
			}
			size, n = int64(u), 9
		} else {
			if _, err := io.ReadFull(br, hdr[1:2]); err != nil {
				return err
			}
			size = int64(hdr[1])
		}
		if size > maxFrame {
			return fmt.Errorf("%w: %d bytes announced, at most %d", ErrFrameTooLarge, size, maxFrame)
		}
		if _, err := w.Write(hdr[:n]); err != nil {
			return err
		}
		if _, err := io.CopyN(w, br, size); err != nil {
			return err
		}
	}
}

// Guard accepts connections on a listener and relays each to target (the guarded socket's
// own, loopback address) through CheckFrames. Refused is called, when set, with each cut
// connection's reason.
type Guard struct {
	ln       net.Listener
	target   string
	maxFrame int64
	Refused  func(err error)
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
}

// NewGuard starts relaying ln's connections to target, with frames of at most maxFrame bytes.
func NewGuard(ln net.Listener, target string, maxFrame int64) *Guard {
	g := &Guard{ln: ln, target: target, maxFrame: maxFrame, conns: map[net.Conn]bool{}}
	g.wg.Add(1)
	go g.accept()
	return g
}

// Addr is the guarded address peers connect to.
func (g *Guard) Addr() net.Addr { return g.ln.Addr() }

// Close stops accepting and cuts every relayed connection.
func (g *Guard) Close() error {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	err := g.ln.Close()
	g.wg.Wait()
	return err
}

func (g *Guard) track(cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	for _, c := range cs {
		g.conns[c] = true
	}
	return true
}

func (g *Guard) untrack(cs ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range cs {
		delete(g.conns, c)
		c.Close()
	}
}

func (g *Guard) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		t, err := net.Dial("tcp", g.target)
		if err != nil {
			c.Close()
			continue
		}
		if !g.track(c, t) {
			c.Close()
			t.Close()
			return
		}
		g.wg.Add(2)
		go func() { // the socket's answers (its greeting, handshake) go back unchanged
			defer g.wg.Done()
			_, _ = io.Copy(c, t)
			g.untrack(c, t)
		}()
		go func() {
			defer g.wg.Done()
			err := CheckFrames(t, c, g.maxFrame)
			if err != nil && (errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrNotZMTP)) && g.Refused != nil {
				g.Refused(err)
			}
			g.untrack(c, t)
		}()
	}
}
