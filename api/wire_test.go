package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// countingListener counts the writes made on the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestAPollAnswerIsOneWrite: over HTTP/1.1 a poll's answer with attempts
// goes out in one write, its header with its body and its length. The
// hub writes one for each attempt it hands out: at 10,000 agents a wave's
// answers are hundreds of writes in a row, and a chunked answer took a
// second write for its last chunk. It fails when the answer is chunked.
func TestAPollAnswerIsOneWrite(t *testing.T) {
	h := &fakeHub{poll: func(node string, _ time.Duration) ([]fleetwave.Attempt, error) {
		return []fleetwave.Attempt{{ID: "web-g1.1.1", Node: node, Payload: fleetwave.AttemptPayload{Command: "true"}}}, nil
	}}
	srv := httptest.NewUnstartedServer(api.New(h, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	l := &countingListener{Listener: srv.Listener}
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	const polls = 3
	for i := range polls {
		req, err := http.NewRequest("GET", srv.URL+"/api/v1/agent/nodes/node-a/attempts?wait=2s", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer token-a")
		resp, err := srv.Client().Do(req) // one kept-alive connection
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("poll %d: %d %v", i, resp.StatusCode, err)
		}
		if len(resp.TransferEncoding) > 0 || resp.ContentLength != int64(len(body)) {
			t.Fatalf("poll %d: transfer encoding %q, length %d for a body of %d bytes; want the length, not chunked",
				i, resp.TransferEncoding, resp.ContentLength, len(body))
		}
		if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
			t.Fatalf("poll %d: Content-Length %q for %d bytes", i, got, len(body))
		}
	}
	// every answer was read in full: the writes of the earlier ones are
	// done (the connection serves its requests one after the other), and
	// so is the last one's, whose client read its whole length
	if got := l.writes.Load(); got != polls {
		t.Fatalf("%d writes for %d answers; want one each", got, polls)
	}
}

// TestAPollAnswerEncodesAsEncodingJSON: the answer written by its own
// codec is encoding/json's bytes for the same answer.
func TestAPollAnswerEncodesAsEncodingJSON(t *testing.T) {
	type answerFields api.AttemptsAnswer // without AppendJSON
	at := fleetwave.Attempt{ID: "r.1.1", Item: "r.1", Rollout: "r", Node: "n<1>", Block: "b&c", Action: "upgrade",
		Generation: 3, Fence: 2, Deadline: time.UnixMilli(1_700_000_000_123).UTC(),
		Payload: fleetwave.AttemptPayload{Command: "deploy", Config: "a: \"x\"\n", OneShot: true}, Delivery: 9}
	for _, a := range []api.AttemptsAnswer{
		{}, {Attempts: []fleetwave.Attempt{}}, {Attempts: []fleetwave.Attempt{}, Report: true},
		{Attempts: []fleetwave.Attempt{at}}, {Attempts: []fleetwave.Attempt{at, {}, at}, Report: true},
	} {
		got, err := a.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(answerFields(a))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("answer:\n got %s\nwant %s", got, want)
		}
	}
}
