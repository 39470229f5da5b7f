package reconciler_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/reconciler"
)

// fzMarker is the content of every file and the value of the environment
// variable the template fuzzer plants: a render that shows it read a file
// or the environment.
const fzMarker = "fz-planted-5e1f0c"

// fzForbiddenTag matches a template that starts with a tag the sandbox
// does not have (file access or recursion): it must fail to parse.
var fzForbiddenTag = regexp.MustCompile(`^\{%[-+]?\s*(include|import|from|extends|block|macro|call)\b`)

var fzCredentialName = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]{0,61}[a-z0-9])?$`)

// fzRender is one render of FuzzTemplate and what the credential store saw.
type fzRender struct {
	out   string
	err   error
	took  time.Duration
	calls []string
}

func fzRenderOnce(src string, vars map[string]any, withCred bool) fzRender {
	var r fzRender
	start := time.Now()
	if withCred {
		opts := reconciler.Options{Credential: func(scope, name string, length int) (string, error) {
			r.calls = append(r.calls, fmt.Sprintf("%s|%s|%d", scope, name, length))
			return strings.Repeat("c", length), nil
		}}
		r.out, r.err = reconciler.RenderWith("block_config_template", src, vars, opts, "workspace/ws")
	} else {
		r.out, r.err = reconciler.Render("block_config_template", src, vars)
	}
	r.took = time.Since(start)
	return r
}

// FuzzTemplate renders arbitrary template sources with simple variables
// (s and n from the fuzzer) in the sandbox, with and without a credential
// store. Properties: no panic reaches the caller; an error wraps
// ErrTemplate and comes with no output; the output is at most
// MaxRenderedSize bytes; error texts are short and never the whole source;
// the same render twice gives the same answer (plans are deterministic);
// nothing of the files of the working directory or of the environment
// reaches the output (planted markers); a template starting with
// include/import/from/extends/block/macro/call fails; the credential store
// is asked only for valid names and lengths, in the render's scope.
//
// FLEETWAVE_FUZZ_STRICT=1 also fails on a panic of the template engine
// that the sandbox recovered ("parse aborted", "render aborted");
// FLEETWAVE_FUZZ_SLOW=<duration> fails on a render slower than that.
func FuzzTemplate(f *testing.F) {
	dir := f.TempDir()
	for _, name := range []string{"block_config_template", "x", "x.txt", "secret", "base.j2", "/etc/hostname"} {
		p := filepath.Join(dir, filepath.Base(name))
		if err := os.WriteFile(p, []byte(fzMarker), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	f.Setenv("FLEETWAVE_FUZZ_PLANTED", fzMarker)
	strict := os.Getenv("FLEETWAVE_FUZZ_STRICT") == "1"
	var slow time.Duration
	if s := os.Getenv("FLEETWAVE_FUZZ_SLOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			f.Fatalf("FLEETWAVE_FUZZ_SLOW: %v", err)
		}
		slow = d
	}

	f.Add("replicas: {{ n }}\nenv: {{ node.labels.env | default('none') }}\n", "prod", int64(3), false)
	f.Add("{% for i in range(n) %}- {{ items[i % 3] }}\n{% endfor %}", "", int64(5), false)
	f.Add("password: {{ credential_get_or_create('db', length=24) }}\n", "x", int64(0), true)
	f.Add("{% include 'x.txt' %}", "", int64(0), false)
	f.Fuzz(func(t *testing.T, src, s string, n int64, withCred bool) {
		// in the planted directory only while rendering: go test reads the
		// corpus from testdata/ of the package directory
		t.Chdir(dir)
		vars := map[string]any{
			"s":     s,
			"n":     n,
			"node":  map[string]any{"id": "n1", "labels": map[string]any{"env": s}},
			"items": []any{"a", s, 1},
		}
		r := fzRenderOnce(src, vars, withCred)
		if slow > 0 && r.took > slow {
			t.Fatalf("render took %v (more than %v)", r.took, slow)
		}
		if r.err != nil {
			msg := r.err.Error()
			if !errors.Is(r.err, reconciler.ErrTemplate) {
				t.Fatalf("error does not wrap ErrTemplate: %v", r.err)
			}
			if r.out != "" {
				t.Fatalf("an error (%v) and %d bytes of output", r.err, len(r.out))
			}
			if len(msg) > 1024 || (len(src) > 400 && strings.Contains(msg, src)) {
				t.Fatalf("error text of %d bytes (source %d bytes)", len(msg), len(src))
			}
			if strict && (strings.Contains(msg, "render aborted") || strings.Contains(msg, "parse aborted")) {
				t.Fatalf("the template engine panicked (recovered): %v", r.err)
			}
		}
		if len(r.out) > reconciler.MaxRenderedSize {
			t.Fatalf("output of %d bytes, limit %d", len(r.out), reconciler.MaxRenderedSize)
		}
		if strings.Contains(r.out, fzMarker) || (r.err != nil && strings.Contains(r.err.Error(), fzMarker)) {
			t.Fatalf("the render read a planted file or variable: %q %v", r.out, r.err)
		}
		if fzForbiddenTag.MatchString(src) && r.err == nil {
			t.Fatalf("a template starting with a forbidden tag rendered: %q", r.out)
		}
		for _, c := range r.calls {
			parts := strings.Split(c, "|")
			var length int
			_, _ = fmt.Sscan(parts[len(parts)-1], &length)
			name := strings.Join(parts[1:len(parts)-1], "|")
			if parts[0] != "workspace/ws" || !fzCredentialName.MatchString(name) ||
				length < reconciler.MinCredentialLen || length > reconciler.MaxCredentialLen {
				t.Fatalf("credential store asked for %q", c)
			}
		}
		again := fzRenderOnce(src, vars, withCred)
		if again.out != r.out || fmt.Sprint(again.err) != fmt.Sprint(r.err) {
			t.Fatalf("two renders differ:\n%q (%v)\n%q (%v)", r.out, r.err, again.out, again.err)
		}
	})
}
