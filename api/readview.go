package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The reads a console repeats every second (the summary, a rollout's page)
// go to Redis, which runs one script at a time: while a script starts a
// wave of thousands of attempts, a read waits for it (at 100,000 nodes,
// hundreds of ms). A client that says it accepts a stale answer
// (Cache-Control: max-stale=N, as the console sends) is answered from the
// last read when the fresh one takes longer than staleHedge, with its age
// in the Age header; the fresh read goes on and becomes the next answer.
// A client that says nothing (the CLI, scripts) always waits for a fresh
// read, so it reads its own writes.

const (
	// staleHedge is how long a request that accepts a stale answer waits
	// for the fresh read before it takes the last one.
	staleHedge = 40 * time.Millisecond
	// maxStale caps what a client may accept ("max-stale" without a value
	// accepts any age, which the hub does not serve).
	maxStale = 60 * time.Second
	// staleReadTimeout bounds a read that goes on after its request was
	// answered from the last one.
	staleReadTimeout = 30 * time.Second
	// viewEntries bounds the reads kept (a rollout's page per cursor and
	// limit): the least recently asked for is dropped.
	viewEntries = 256
)

// acceptsStale returns the staleness r's Cache-Control max-stale accepts,
// capped at maxStale, and false when it says nothing or something invalid
// (then the answer is fresh).
func acceptsStale(r *http.Request) (time.Duration, bool) {
	for _, v := range r.Header.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, val, hasVal := strings.Cut(strings.TrimSpace(d), "=")
			if !strings.EqualFold(name, "max-stale") {
				continue
			}
			if !hasVal {
				return maxStale, true
			}
			n, err := strconv.Atoi(strings.Trim(val, `"`))
			if err != nil || n < 0 {
				return 0, false
			}
			return min(time.Duration(n)*time.Second, maxStale), true
		}
	}
	return 0, false
}

// readView keeps the last answer of each repeated read and the read in
// progress, which requests share: however many consoles are open, one
// read of each at a time reaches Redis.
type readView struct {
	now     func() time.Time
	hedge   time.Duration
	mu      sync.Mutex
	entries map[string]*viewEntry
}

type viewEntry struct {
	val     any
	at      time.Time // when the read that gave val started
	ok      bool      // val holds an answer
	used    time.Time // last asked for
	reading *viewRead
}

// viewRead is a read in progress; done is closed when val and err are set.
type viewRead struct {
	done chan struct{}
	val  any
	err  error
}

func newReadView(now func() time.Time) *readView {
	return &readView{now: now, hedge: staleHedge, entries: map[string]*viewEntry{}}
}

// get answers the read key: a fresh read (joining the one in progress, or
// starting one), or, when that takes longer than the hedge, the last
// answer if it is at most stale old; age is that answer's age (0 when
// fresh). A failed read is never kept; its error is the answer of those
// that waited for it.
func (v *readView) get(ctx context.Context, key string, stale time.Duration, read func(context.Context) (any, error)) (val any, age time.Duration, err error) {
	v.mu.Lock()
	now := v.now()
	e := v.entries[key]
	if e == nil {
		v.evict()
		e = &viewEntry{}
		v.entries[key] = e
	}
	e.used = now
	rd := e.reading
	if rd == nil {
		rd = &viewRead{done: make(chan struct{})}
		e.reading = rd
		// the read outlives a request answered from the last one
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleReadTimeout)
		go func() {
			defer cancel()
			val, err := read(rctx)
			v.mu.Lock()
			if err == nil {
				e.val, e.at, e.ok = val, now, true
			}
			e.reading = nil
			rd.val, rd.err = val, err
			v.mu.Unlock()
			close(rd.done)
		}()
	}
	usable := e.ok && now.Sub(e.at) <= stale
	v.mu.Unlock()

	var hedge <-chan time.Time
	if usable {
		t := time.NewTimer(v.hedge)
		defer t.Stop()
		hedge = t.C
	}
	select {
	case <-rd.done:
		return rd.val, 0, rd.err
	case <-hedge:
		v.mu.Lock()
		defer v.mu.Unlock()
		// the read may have just ended: its answer is then the newest
		return e.val, max(v.now().Sub(e.at), 0), nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// evict drops the least recently asked for entry not being read when the
// view is full (v.mu held).
func (v *readView) evict() {
	if len(v.entries) < viewEntries {
		return
	}
	var oldest string
	var at time.Time
	for k, e := range v.entries {
		if e.reading == nil && (oldest == "" || e.used.Before(at)) {
			oldest, at = k, e.used
		}
	}
	if oldest != "" {
		delete(v.entries, oldest)
	}
}

// viewed answers read through the view when r, a GET, accepts a stale
// answer, setting the Age header of a stale one, and directly otherwise:
// the answer of a write (a rollout's pause answers its page) is always
// read after it.
func viewed[T any](s *server, w http.ResponseWriter, r *http.Request, key string, read func(context.Context) (T, error)) (T, error) {
	stale, ok := acceptsStale(r)
	if !ok || r.Method != http.MethodGet {
		return read(r.Context())
	}
	val, age, err := s.view.get(r.Context(), key, stale, func(ctx context.Context) (any, error) { return read(ctx) })
	if err != nil {
		var zero T
		return zero, err
	}
	if age > 0 {
		w.Header().Set("Age", strconv.Itoa(int(age/time.Second)))
		s.metrics.stale.WithLabelValues(r.Pattern).Inc()
	}
	return val.(T), nil
}
