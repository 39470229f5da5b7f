package gitsync

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// logBuffer is a log destination safe for the goroutines of a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestALongHoldOfTheMirrorIsLogged: an operation that waits for the
// mirror's lock slowLock or more says so with the operation that held
// it, and the holder says how long it held it: what a hub logging at warn
// shows of a pushed commit held back.
func TestALongHoldOfTheMirrorIsLogged(t *testing.T) {
	isolateGit(t)
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": "{}"})
	var logs logBuffer
	r := openAt(t, url, filepath.Join(t.TempDir(), "mirror"), WithLogger(zerolog.New(&logs).Level(zerolog.WarnLevel)))
	fetch(t, r)
	if s := logs.String(); s != "" {
		t.Fatalf("warnings before any wait: %s", s)
	}
	unlock := r.lock("test: hold")
	waiting, fetched := make(chan struct{}), make(chan error, 1)
	go func() {
		close(waiting)
		_, _, err := r.Fetch(context.Background())
		fetched <- err
	}()
	<-waiting
	time.Sleep(slowLock + 2*time.Second) // the fetch waits all along, however slowly it started
	unlock()
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	s := logs.String()
	for _, want := range []string{
		`"op":"fetchTracked"`, `"held_by":"test: hold"`, `"message":"waited for the mirror's lock"`,
		`"op":"test: hold"`, `"message":"held the mirror's lock"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the logs lack %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"op":"fetchTracked","held_ms"`) {
		t.Errorf("the quick fetch was logged as a long hold:\n%s", s)
	}
}
