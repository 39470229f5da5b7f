package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Start runs a headless Chromium (the binary of Require: the test is skipped
// or failed without one) driven over the DevTools protocol, and returns a
// chromedp context on its first tab. The browser stops when the test ends.
// Derive a context with a timeout from it to bound one step; never give
// the returned context a timeout, which would stop the whole browser.
func Start(tb testing.TB) context.Context {
	tb.Helper()
	bin := Require(tb)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("mute-audio", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	var mu sync.Mutex
	ended := false
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !ended { // testing forbids logging once the test is over
			tb.Logf("chromium: "+format, args...)
		}
	}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logf))
	tb.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a deadline
		tb.Fatalf("start chromium %s: %v", bin, err)
	}
	return ctx
}

// NewTab opens another tab of the browser of ctx (a context of Start). A
// tab has its own session storage, so it signs in on its own. It is closed
// when the test ends.
func NewTab(tb testing.TB, ctx context.Context) context.Context {
	tb.Helper()
	tab, cancel := chromedp.NewContext(ctx)
	tb.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		tb.Fatalf("open a tab: %v", err)
	}
	return tab
}

// ArtifactsDir is where a test keeps its screenshots: a directory named
// after the test under $FLEETWAVE_ARTIFACTS when set (kept after the test),
// else a temporary directory of the test.
func ArtifactsDir(tb testing.TB) string {
	tb.Helper()
	root := os.Getenv("FLEETWAVE_ARTIFACTS")
	if root == "" {
		return tb.TempDir()
	}
	dir := filepath.Join(root, fileName(tb.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("artifacts directory: %v", err)
	}
	return dir
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileName(s string) string { return strings.Trim(unsafeName.ReplaceAllString(s, "_"), "_") }

// Shot writes a PNG of the whole page of ctx to dir/name.png and returns
// its path. A failure is only logged: a screenshot documents a test, it
// decides nothing.
func Shot(tb testing.TB, ctx context.Context, dir, name string) string {
	tb.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(dir, fileName(name)+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		tb.Logf("screenshot %s: %v", name, err)
		return ""
	}
	return path
}

// Do runs steps on the tab of ctx within timeout, failing the test with
// what and the page's text when they fail.
func Do(tb testing.TB, ctx context.Context, timeout time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		tb.Fatalf("%s: %v\npage:\n%s", what, err, PageText(ctx))
	}
}

// WaitJS waits until the JavaScript expression is truthy in the page of
// ctx, checking every 100 ms, for at most timeout; then it fails the test
// with what and the page's text. It returns the expression's value as
// JSON-decoded into T.
func WaitJS[T any](tb testing.TB, ctx context.Context, timeout time.Duration, what, expr string) T {
	tb.Helper()
	sctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		tb.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, PageText(ctx))
	}
	return v
}

// Eval evaluates a JavaScript expression in the page of ctx.
func Eval[T any](tb testing.TB, ctx context.Context, expr string) T {
	tb.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// PageText is the visible text of the page of ctx and its address, for
// failure messages ("" when the page cannot be read).
func PageText(ctx context.Context) string {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return s
}
