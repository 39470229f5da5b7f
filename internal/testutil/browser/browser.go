// Package browser drives a real headless Chromium for console tests: it
// loads a page, lets its scripts run and returns the resulting DOM.
//
// The binary is $CHROMIUM_BIN, else chromium or chromium-browser from PATH.
// Without it the test is skipped on a developer machine and fails in CI
// (CI=true), where .ci/run installs Debian's chromium package.
package browser

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Binary returns the Chromium executable, or "" when none is installed.
func Binary() string {
	if p := os.Getenv("CHROMIUM_BIN"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Require returns the Chromium binary or ends the test: skipped locally,
// failed in CI.
func Require(tb testing.TB) string {
	tb.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal("chromium not found: apt-get install chromium (or set CHROMIUM_BIN)")
		}
		tb.Skip("chromium not found: apt-get install chromium to run the console tests")
	}
	return bin
}

func args(extra ...string) []string {
	return append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--mute-audio",
	}, extra...)
}

// DumpDOM loads url in headless Chromium, lets the page's scripts run for
// budget of virtual time and returns the serialized DOM.
func DumpDOM(tb testing.TB, url string, budget time.Duration) string {
	tb.Helper()
	bin := Require(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args("--user-data-dir="+tb.TempDir(),
		"--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10), "--dump-dom", url)...)
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}

// Screenshot writes a PNG of url to path after budget of virtual time.
func Screenshot(tb testing.TB, url, path string, budget time.Duration) {
	tb.Helper()
	bin := Require(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args("--user-data-dir="+tb.TempDir(), "--window-size=1280,900",
		"--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10), "--screenshot="+path, url)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("chromium --screenshot %s: %v\n%s", url, err, out)
	}
}
