package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave"
)

// maxAnswer caps what the agent reads from one hub answer.
const maxAnswer = 16 << 20

// hubError is an error answer of the hub.
type hubError struct {
	Status  int
	Code    string
	Message string
}

func (e *hubError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("hub answered %d", e.Status)
	}
	return fmt.Sprintf("hub answered %d %s: %s", e.Status, e.Code, e.Message)
}

// retryable reports whether a hub call that failed with err may succeed
// later: transport errors, 5xx, 408, 429, and 401/403 (a token being
// rotated on the hub). Other 4xx answers will not change.
func retryable(err error) bool {
	var he *hubError
	if !errors.As(err, &he) {
		return true
	}
	switch he.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	}
	return he.Status >= 500
}

// client talks to the hub's agent endpoints (see the api package docs for
// the wire format; the agent shares only the JSON with it).
type client struct {
	base  string // hub URL without a trailing slash
	node  string
	token string
	http  *http.Client
}

func (c *client) nodePath(rest string) string {
	return c.base + "/api/v1/agent/nodes/" + url.PathEscape(c.node) + rest
}

func (c *client) register(ctx context.Context, r fleetwave.Report) error {
	return c.do(ctx, http.MethodPost, c.nodePath("/register"), r, nil)
}

func (c *client) report(ctx context.Context, r fleetwave.Report) error {
	return c.do(ctx, http.MethodPost, c.nodePath("/report"), r, nil)
}

func (c *client) result(ctx context.Context, res fleetwave.AttemptResult) error {
	return c.do(ctx, http.MethodPost, c.nodePath("/attempts/"+url.PathEscape(res.AttemptID)+"/result"), res, nil)
}

// poll long-polls the node's attempts, saying what the agent received
// (rc); the request may last wait plus a margin for the hub to answer.
// report says the hub asks for a full report now.
func (c *client) poll(ctx context.Context, wait time.Duration, rc fleetwave.Receipt) (atts []fleetwave.Attempt, report bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	var out struct {
		Attempts []fleetwave.Attempt `json:"attempts"`
		Report   bool                `json:"report"`
	}
	u := c.nodePath("/attempts") + "?wait=" + url.QueryEscape(wait.String()) + rc.Query()
	if err := c.do(ctx, http.MethodGet, u, nil, &out); err != nil {
		return nil, false, err
	}
	return out.Attempts, out.Report, nil
}

// callTimeout bounds a hub call other than the long poll.
const callTimeout = 30 * time.Second

func (c *client) do(ctx context.Context, method, u string, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "fleetwave-agent/"+fleetwave.Version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		he := &hubError{Status: resp.StatusCode}
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			he.Code, he.Message = e.Error.Code, e.Error.Message
		} else {
			he.Message = strings.TrimSpace(string(b[:min(len(b), 200)]))
		}
		return he
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

// backoff is capped exponential backoff with full jitter.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	d := b.min << min(b.n, 20)
	if d <= 0 || d > b.max {
		d = b.max
	}
	b.n++
	// Full jitter in [d/2, d): agents restarted together spread out.
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.n = 0 }

// sleep waits d or until ctx is done; it returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
