package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestTakeNeverTwice: ports taken one after another, none bound in
// between, are all different, and each can be listened on.
func TestTakeNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p, err := Take()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	p, err := Take()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("the port taken cannot be listened on: %v", err)
	}
	_ = l.Close()
}

// TestTakeSkipsListenedPorts: a port somebody listens on is never handed
// out.
func TestTakeSkipsListenedPorts(t *testing.T) {
	var ls []net.Listener
	busy := map[int]bool{}
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		busy[l.Addr().(*net.TCPAddr).Port] = true
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range 100 {
		p, err := Take()
		if err != nil {
			t.Fatal(err)
		}
		if busy[p] {
			t.Fatalf("port %d is listened on, and was handed out", p)
		}
	}
}

// TestTaken: a Go listener's error and redis-server's log line both say a
// port was taken; another failure does not.
func TestTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil || !Taken(err.Error()) {
		t.Fatalf("listening on a taken port: %v, not seen as taken", err)
	}
	if !Taken("# Warning: Could not create server TCP listening socket 127.0.0.1:44173: bind: Address already in use") {
		t.Fatal("redis-server's log line not seen as taken")
	}
	if Taken("listen: permission denied") {
		t.Fatal("another failure seen as taken")
	}
}
