package api

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"sync"
)

//go:embed console.html
var consoleHTML string

// consoleTemplate is parsed once, on first use.
var consoleTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("console").Parse(consoleHTML))
})

// console serves the single-page console. Its inline style and script carry
// a per-request nonce so the Content-Security-Policy can forbid everything
// else (no external assets, no injected scripts).
func (s *server) console(w http.ResponseWriter, r *http.Request) {
	var raw [18]byte
	_, _ = rand.Read(raw[:])
	nonce := base64.RawURLEncoding.EncodeToString(raw[:]) // no + or /: the template escapes them in attributes
	var buf bytes.Buffer
	if err := consoleTemplate().Execute(&buf, struct{ Nonce string }{nonce}); err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
		"'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}
