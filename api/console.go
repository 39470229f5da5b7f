package api

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
	"sync"
)

// The console is one page, hash-routed (#/, #/rollouts/{id}, #/nodes,
// #/nodes/{id}, #/new, #/approvals), built from three embedded files: the
// page, its style and its script. Style and script are inlined into the
// page under a per-request nonce, so the page needs no other request than
// the API's and its Content-Security-Policy can forbid everything else.
var (
	//go:embed console/index.html
	consoleHTML string
	//go:embed console/app.css
	consoleCSS string
	//go:embed console/app.js
	consoleJS string
)

// consolePage is what the template fills in.
type consolePage struct {
	Nonce  string
	Style  template.CSS
	Script template.JS
}

// consoleTemplate is parsed once, on first use. The assets are trusted:
// they are part of the binary, and neither may close its element early.
var consoleTemplate = sync.OnceValue(func() *template.Template {
	if strings.Contains(strings.ToLower(consoleJS), "</script") || strings.Contains(strings.ToLower(consoleCSS), "</style") {
		panic("console assets must not close their element")
	}
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
	page := consolePage{Nonce: nonce, Style: template.CSS(consoleCSS), Script: template.JS(consoleJS)}
	if err := consoleTemplate().Execute(&buf, page); err != nil {
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
