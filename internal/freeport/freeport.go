// Package freeport hands out loopback TCP ports for servers a process is
// about to start: test topologies, hubs of a scale run.
//
// Asking the system for port 0 and closing the listener gives a port free
// at that instant, and the system may give the same port to the next ask
// before the server meant to have it binds it. Two servers of one
// topology then get the same port and the second cannot start. Take never
// hands out a port twice in one process.
package freeport

import (
	"errors"
	"net"
	"strings"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// tries bounds how many ports Take looks at before giving up; the system's
// ephemeral range has thousands.
const tries = 1000

// Take returns a loopback TCP port nobody listens on now and this process
// was not given before.
func Take() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	// ports seen and already given stay held until Take returns, so the
	// system offers another one on the next ask
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if !given[p] {
			given[p] = true
			return p, nil
		}
	}
	return 0, errors.New("freeport: every port the system offered was handed out before")
}

// StartTries bounds how often a caller starts a server again on a fresh
// port because the one it was given was taken meanwhile.
const StartTries = 5

// Taken says whether a server's error or log says its port was bound by
// somebody else between Take and the server's own bind (another process, a
// connection's local port): the server is to be started on a fresh port.
func Taken(text string) bool {
	return strings.Contains(strings.ToLower(text), "address already in use")
}
