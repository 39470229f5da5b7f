package hub

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkH2CAnswerBesideHeldPolls: requests answered one after the other
// on an h2c connection that also holds polls, as a proxy's connection
// carries its agents' held polls. "bundled" is net/http's own HTTP/2
// server (its scheduler walks every open stream for each frame it sends),
// "random" the hub's (golang.org/x/net/http2's random write scheduler).
//
//	go test -run '^$' -bench H2CAnswerBesideHeldPolls ./hub/
func BenchmarkH2CAnswerBesideHeldPolls(b *testing.B) {
	for _, held := range []int{0, 240} {
		for _, sched := range []string{"bundled", "random"} {
			b.Run(fmt.Sprintf("held=%d/%s", held, sched), func(b *testing.B) {
				benchH2CBesideHeld(b, held, sched == "bundled")
			})
		}
	}
}

func benchH2CBesideHeld(b *testing.B, held int, bundled bool) {
	release := make(chan struct{})
	var holding atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			holding.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, `{"attempts":[]}`)
	})
	srv := newServer(handler, defaultServerLimits, zerolog.Nop())
	if bundled {
		srv.TLSNextProto = nil // net/http sets up its own HTTP/2 server
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	tr := &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := "http://" + ln.Addr().String()
	get := func(path string) error {
		resp, err := c.Get(url + path)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err == nil && resp.ProtoMajor != 2 {
			err = fmt.Errorf("HTTP/%d, want h2c", resp.ProtoMajor)
		}
		return err
	}
	if err := get("/quick"); err != nil { // the server's SETTINGS: one connection from here on
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for range held {
		wg.Go(func() { _ = get("/hold") })
	}
	for holding.Load() < int32(held) {
		time.Sleep(time.Millisecond)
	}
	for b.Loop() {
		if err := get("/quick"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(release)
	wg.Wait()
}
